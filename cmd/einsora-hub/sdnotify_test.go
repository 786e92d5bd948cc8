package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeNotifiesReadyOnceListenersAccept plays systemd: it listens on a
// NOTIFY_SOCKET and, when READY=1 arrives, the admin API must already
// answer HTTP and the agents' listener accept connections.
func TestServeNotifiesReadyOnceListenersAccept(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)

	ctx, cancel := context.WithCancel(context.Background())
	root := newRoot()
	root.SetArgs([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"})
	root.SetOut(io.Discard)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	}()

	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	msg := string(buf[:n])
	if !strings.Contains(msg, "READY=1") {
		t.Fatalf("first notification %q is not READY=1", msg)
	}
	// STATUS=admin API on http://…, agents connect to https://…
	var adminURL, agentURL string
	for _, f := range strings.Fields(msg) {
		f = strings.TrimSuffix(f, ",")
		switch {
		case strings.HasPrefix(f, "http://"):
			adminURL = f
		case strings.HasPrefix(f, "https://"):
			agentURL = f
		}
	}
	if adminURL == "" || agentURL == "" {
		t.Fatalf("READY carries no URLs: %q", msg)
	}
	// Dialled before anything else could have happened: READY came after
	// the listeners were bound, so these must not be refused.
	u, _ := url.Parse(agentURL)
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatalf("agents' listener refuses at READY: %v", err)
	}
	c.Close()
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(adminURL + "/v1/tenants")
	if err != nil {
		t.Fatalf("admin API does not answer at READY: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		t.Errorf("admin API without a token: %d, want 401 or 403", resp.StatusCode)
	}
}
