package hub

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"einsora.dev/edge/protocol"
)

func FuzzDecodeLogLine(f *testing.F) {
	for _, seed := range []string{
		`{"t":"2026-11-29T10:00:00Z","s":"stdout","l":"hello"}`,
		`{"t":"2026-11-29T10:00:00.123456789+02:00","s":"stderr","l":"\u001b[2J\u0000"}`,
		`{"s":"system"}`,
		`{"t":"2026-11-29T10:00:00Z","s":"stdout","l":"x","extra":1}`,
		`{"l":"a"} {"l":"b"}`,
		`not json`,
		`{"t":"yesterday"}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		l, err := DecodeLogLine(raw)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		// What is accepted survives the relay's encoding unchanged.
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeLogLine(b)
		if err != nil || !reflect.DeepEqual(again.Line, l.Line) || again.Stream != l.Stream || !again.Time.Equal(l.Time) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, l)
		}
		_ = protocol.LogLine{}
	})
}

func FuzzDecodeLogNote(f *testing.F) {
	for _, seed := range []string{
		`{"m":"m-1","t":"0123456789abcdef0123456789abcdef","w":"w-1","u":"https://hub-a.test:8443"}`,
		`{"m":"m-1","t":"0123456789abcdef0123456789abcdef","w":"w-1","n":10,"s":"2026-12-01T10:00:00+02:00","f":true,"u":"https://[::1]:8443"}`,
		`{"m":"m-1","t":"0123456789abcdef0123456789abcdef","w":"w-1","u":"http://hub-a.test:8443"}`,
		`{"m":"m-1","t":"0123456789abcdef0123456789abcdef","w":"w-1","u":"https://user@hub-a.test/x?y#z"}`,
		`{"m":"m\u0000","t":"0123456789ABCDEF0123456789ABCDEF","w":"","n":-1,"u":""}`,
		`{"m":"m-1","t":"0123456789abcdef0123456789abcdef","w":"w-1","u":"https://a","x":1}`,
		`{"m":"m-1"} {"m":"m-2"}`,
		`{"s":"0000-01-01T00:00:00Z"}`,
		`not json`,
		``,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		machine, req, err := decodeLogNote(body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		// What is accepted is within every bound, and encodes again
		// to a note that decodes to the same request.
		if len(machine) > protocol.MaxIDLength || len(req.Workload) > protocol.MaxIDLength || len(req.URL) > protocol.MaxHubURLLen || req.Tail < 0 ||
			!strings.HasPrefix(req.URL, "https://") || len(req.Token) != 32 {
			t.Fatalf("accepted out of bounds: %q %+v", machine, req)
		}
		again, err := encodeLogNote(machine, req)
		if err != nil {
			t.Fatalf("accepted %q, cannot encode it again: %v", body, err)
		}
		m2, r2, err := decodeLogNote(again)
		if err != nil || m2 != machine || r2.Token != req.Token || r2.URL != req.URL || !r2.Since.Equal(req.Since) || r2.Tail != req.Tail || r2.Follow != req.Follow {
			t.Fatalf("round trip: %q %+v, %v; want %q %+v", m2, r2, err, machine, req)
		}
	})
}
