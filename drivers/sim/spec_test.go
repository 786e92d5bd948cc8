package sim

import (
	"bufio"
	"context"
	"errors"
	"net"
	"reflect"
	"strconv"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/internal/testnet"
	"einsora.dev/edge/protocol"
)

func freePort(t *testing.T) int { return testnet.FreePort(t) }

// readLine dials the TCP port and returns the line it serves, or the error.
func readLine(port int) (string, error) {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	return bufio.NewReader(c).ReadString('\n')
}

func askUDP(port int) (string, error) {
	c, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("?")); err != nil {
		return "", err
	}
	b := make([]byte, 512)
	n, err := c.Read(b)
	return string(b[:n]), err
}

func TestSpecRecorded(t *testing.T) {
	d, err := New(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ws := protocol.WorkloadSpec{Command: []string{"a", "b c"}, Env: map[string]string{"A": "1"},
		SecretEnv: map[string]string{"T": "secret"}, Workdir: "/w", Restart: &protocol.RestartPolicy{Policy: "always"}}
	if err := d.Start(context.Background(), drivers.Spec{Workload: "w", Attempt: 1, Image: "sim:", WorkloadSpec: ws}); err != nil {
		t.Fatal(err)
	}
	got, err := d.Spec("w")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ws) {
		t.Errorf("got %+v, want %+v", got, ws)
	}
	err = d.Start(context.Background(), drivers.Spec{Workload: "bad", Attempt: 1, Image: "sim:",
		WorkloadSpec: protocol.WorkloadSpec{Workdir: "relative"}})
	if !errors.Is(err, protocol.ErrInvalidSpec) {
		t.Errorf("bad spec: got %v, want ErrInvalidSpec", err)
	}
}

// TestListen: a "listen" instance's ports answer while it runs and close
// when it stops, exits or is removed.
func TestListen(t *testing.T) {
	clk := clock.NewFake(time.Now())
	d, err := New(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	tcp, udp := freePort(t), freePort(t)
	spec := drivers.Spec{Workload: "w", Attempt: 1, Image: "sim:listen,exit-after=1m", WorkloadSpec: protocol.WorkloadSpec{
		Ports: []protocol.Port{{Host: tcp, Container: 80}, {Host: udp, Container: 53, Proto: "udp"}}}}
	if err := d.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if got, err := readLine(tcp); got != "sim w\n" {
		t.Errorf("tcp while running: got %q, %v", got, err)
	}
	if got, err := askUDP(udp); got != "sim w\n" {
		t.Errorf("udp while running: got %q, %v", got, err)
	}
	if err := d.Stop(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := readLine(tcp); err == nil {
		t.Error("tcp port answers after Stop")
	}
	spec.Attempt = 2
	if err := d.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if got, err := readLine(tcp); got != "sim w\n" {
		t.Errorf("tcp after a new start: got %q, %v", got, err)
	}
	clk.Advance(2 * time.Minute)
	list, err := d.List(ctx)
	if err != nil || len(list) != 1 || list[0].State != drivers.StateExited {
		t.Fatalf("List after exit-after: %+v, %v", list, err)
	}
	if _, err := readLine(tcp); err == nil {
		t.Error("tcp port answers after the instance exited")
	}
	spec.Attempt = 3
	if err := d.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := readLine(tcp); err == nil {
		t.Error("tcp port answers after Remove")
	}
}

// TestListenPortTaken: a port another process holds is an error, not a
// silent success.
func TestListenPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d, err := New(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	port := l.Addr().(*net.TCPAddr).Port
	err = d.Start(context.Background(), drivers.Spec{Workload: "w", Attempt: 1, Image: "sim:listen",
		WorkloadSpec: protocol.WorkloadSpec{Ports: []protocol.Port{{Host: port, Container: 80}}}})
	if err == nil {
		t.Fatal("Start published a port already taken")
	}
	list, err := d.List(context.Background())
	if err != nil || len(list) != 1 || list[0].State != drivers.StateFailed || list[0].Code != protocol.CodeFailedStart {
		t.Errorf("List: got %+v, %v; want w failed_start", list, err)
	}
}

// TestFollowLogs: one system line per state, on the driver's clock, and
// the follow ends with the instance.
func TestFollowLogs(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d, err := New(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Start(context.Background(), drivers.Spec{Workload: "w", Attempt: 1, Image: "sim:start-delay=1s,exit-after=2s,exit-code=4"}); err != nil {
		t.Fatal(err)
	}
	lines := make(chan drivers.LogLine, 10)
	done := make(chan error, 1)
	go func() {
		done <- d.FollowLogs(context.Background(), "w", time.Time{}, func(l drivers.LogLine) { lines <- l })
	}()
	var got []string
	deadline := time.After(10 * time.Second)
	for len(got) < 3 {
		select {
		case l := <-lines:
			if l.Stream != drivers.LogSystem || !l.Time.Equal(clk.Now()) {
				t.Errorf("line %+v at %s", l, clk.Now())
			}
			got = append(got, l.Line)
		case <-time.After(5 * time.Millisecond):
			if clk.Timers() > 0 {
				clk.Advance(LogPoll)
			}
		case <-deadline:
			t.Fatalf("lines so far: %q", got)
		}
	}
	want := []string{"sim: w attempt 1 is starting", "sim: w attempt 1 is running", "sim: w attempt 1 is exited with code 4"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("FollowLogs did not end with the instance")
	}
}
