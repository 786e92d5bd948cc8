package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A real notify socket, as systemd gives a Type=notify service.
func TestNotifyServiceReadyAndWatchdog(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))

	h := startAgent(t, t.TempDir(), newFakeHub())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.agent.NotifyService(ctx)
	}()
	var got []string
	buf := make([]byte, 256)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for !(contains(got, "READY=1") && contains(got, "WATCHDOG=1")) {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, strings.TrimSpace(string(buf[:n])))
	}
	cancel()
	<-done
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}
