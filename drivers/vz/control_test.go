package vz

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/drivers"
)

// serveOnce listens on a socket in a temp dir and gives each connection
// to answer.
func serveOnce(t *testing.T, answer func(net.Conn)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "c.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go answer(c)
		}
	}()
	return sock
}

func TestCallGivesFixedCodes(t *testing.T) {
	readReq := func(c net.Conn) { _, _ = bufio.NewReader(c).ReadString('\n') }
	tests := []struct {
		name   string
		answer func(net.Conn)
		want   Reason
	}{
		{"unknown_state", func(c net.Conn) { readReq(c); c.Write([]byte(`{"state":"dancing"}` + "\n")); c.Close() }, ReasonControlGarbage},
		{"not_json", func(c net.Conn) { readReq(c); c.Write([]byte("HTTP/1.1 200 OK\n")); c.Close() }, ReasonControlGarbage},
		{"unknown_field", func(c net.Conn) { readReq(c); c.Write([]byte(`{"state":"running","x":1}` + "\n")); c.Close() }, ReasonControlGarbage},
		{"endless_line", func(c net.Conn) {
			readReq(c)
			for {
				if _, err := c.Write([]byte(strings.Repeat("a", 1024))); err != nil {
					return
				}
			}
		}, ReasonControlGarbage},
		{"unterminated", func(c net.Conn) { readReq(c); c.Write([]byte(`{"state":"running"}`)); c.Close() }, ReasonControlGarbage},
		{"silent", func(c net.Conn) { readReq(c); time.Sleep(5 * time.Second); c.Close() }, ReasonHelperUnresponsive},
		{"closes", func(c net.Conn) { c.Close() }, ReasonHelperUnresponsive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := serveOnce(t, tt.answer)
			start := time.Now()
			_, err := Call(context.Background(), sock, OpState)
			if got := reasonOf(err, ""); got != tt.want {
				t.Fatalf("err %v, want %s", err, tt.want)
			}
			if el := time.Since(start); el > controlTimeout+time.Second {
				t.Fatalf("call took %v, over its deadline", el)
			}
		})
	}
	if _, err := Call(context.Background(), filepath.Join(t.TempDir(), "none.sock"), OpState); reasonOf(err, "") != ReasonHelperUnresponsive {
		t.Fatalf("no socket: %v", err)
	}
}

func TestCallRoundTrip(t *testing.T) {
	sock := serveOnce(t, func(c net.Conn) {
		serveConn(c, func(q Request) Response {
			return Response{State: HelperInstalling, Guest: GuestMacOS, Progress: 42, Error: q.Op}
		})
	})
	resp, err := Call(context.Background(), sock, OpStop)
	if err != nil {
		t.Fatal(err)
	}
	if resp.State != HelperInstalling || resp.Progress != 42 || resp.Error != OpStop || resp.Guest != GuestMacOS {
		t.Fatalf("got %+v", resp)
	}
}

// The helper's side: a request that is not the protocol gets the state and
// an error, never a panic.
func TestServeConnRejectsBadRequests(t *testing.T) {
	var ops []string
	sock := serveOnce(t, func(c net.Conn) {
		serveConn(c, func(q Request) Response { ops = append(ops, q.Op); return Response{State: HelperRunning} })
	})
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(`{"op":"format-disk"}` + "\n"))
	line, err := readLine(bufio.NewReader(c))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := DecodeResponse(line)
	if err != nil || resp.Error == "" {
		t.Fatalf("got %+v, %v: want the state with an error", resp, err)
	}
	if len(ops) != 1 || ops[0] != OpState {
		t.Fatalf("handler saw %q, want only a state request", ops)
	}
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"state":"running","guest":"linux","pid":12}`))
	f.Add([]byte(`{"state":"installing","progress":101}`))
	f.Add([]byte(`{"state":"running"}{"state":"running"}`))
	f.Add([]byte(strings.Repeat("[", 5000)))
	f.Add([]byte(`{"state":"stopped","error":"` + strings.Repeat("e", 2000) + `"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := DecodeResponse(b)
		if err != nil {
			return
		}
		if resp.Progress < 0 || resp.Progress > 100 || len(resp.Error) > 1024 {
			t.Fatalf("accepted out-of-bounds response %+v", resp)
		}
	})
}

func FuzzReadLine(f *testing.F) {
	f.Add([]byte("{}\n"))
	f.Add([]byte(strings.Repeat("x", maxLine+10) + "\n"))
	f.Add([]byte("no newline"))
	f.Fuzz(func(t *testing.T, b []byte) {
		line, err := readLine(bufio.NewReaderSize(strings.NewReader(string(b)), 16))
		if err == nil && len(line) > maxLine {
			t.Fatalf("line of %d bytes accepted", len(line))
		}
		if err == nil {
			_, _ = DecodeRequest(line)
		}
	})
}

func TestCheckEntitlement(t *testing.T) {
	signed := "Executable=/opt/homebrew/bin/einsora-agent\n[Dict]\n\t[Key] com.apple.security.virtualization\n\t[Value]\n\t\t[Bool] true\n"
	tests := []struct {
		name string
		out  string
		err  error
		ok   bool
	}{
		{"signed", signed, nil, true},
		{"ad_hoc_without_entitlements", "Executable=/x\n", nil, false},
		{"codesign_fails", "/x: code object is not signed at all\n", errors.New("exit status 1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotArgs []string
			run := func(_ context.Context, name string, args ...string) ([]byte, error) {
				gotArgs = append([]string{name}, args...)
				return []byte(tt.out), tt.err
			}
			err := checkEntitlement(context.Background(), "/x", run)
			if (err == nil) != tt.ok {
				t.Fatalf("err %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, drivers.ErrUnavailable) {
				t.Fatalf("err %v does not wrap ErrUnavailable", err)
			}
			if strings.Join(gotArgs, " ") != "/usr/bin/codesign -d --entitlements - /x" {
				t.Fatalf("ran %q", gotArgs)
			}
		})
	}
}

func TestProbeWithoutShim(t *testing.T) {
	if Available {
		t.Skip("this build has the shim")
	}
	d, err := New(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Probe(context.Background()); !errors.Is(err, drivers.ErrUnavailable) {
		t.Fatalf("probe: %v, want ErrUnavailable", err)
	}
}
