package hub

import (
	"encoding/json"
	"errors"
	"reflect"
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
