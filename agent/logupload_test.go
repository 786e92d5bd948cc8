package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/internal/syncbuf"
	"einsora.dev/edge/protocol"
)

// uploadingHub is a fake hub whose transport also uploads logs: each
// upload's lines are kept by token, and it reads at most keep lines of one
// before it closes it, as a hub does when its reader leaves.
type uploadingHub struct {
	*fakeHub
	keep    int
	mu      sync.Mutex
	lines   map[string][]protocol.LogLine
	started map[string]int
	ended   map[string]bool
}

func (u *uploadingHub) UploadLogs(ctx context.Context, token string, body io.Reader) error {
	u.mu.Lock()
	u.started[token]++
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.ended[token] = true
		u.mu.Unlock()
	}()
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		var l protocol.LogLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return err
		}
		u.mu.Lock()
		u.lines[token] = append(u.lines[token], l)
		n := len(u.lines[token])
		u.mu.Unlock()
		if n >= u.keep {
			return nil
		}
	}
	return sc.Err()
}

func (u *uploadingHub) get(token string) ([]protocol.LogLine, int, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]protocol.LogLine(nil), u.lines[token]...), u.started[token], u.ended[token]
}

func TestUploadsStreamTheRingToTheHub(t *testing.T) {
	f := newFakeHub()
	u := &uploadingHub{fakeHub: f, keep: 1000, lines: map[string][]protocol.LogLine{}, started: map[string]int{}, ended: map[string]bool{}}
	h := startAgent(t, t.TempDir(), f, func(c *Config) { c.Transport = u })
	w := run("w-1", 1)
	w.Image = "sim:"
	f.set(w)
	waitCode(t, f, "w-1", protocol.CodeRunning)
	waitFor(t, "the running line kept", func() bool {
		es, _ := h.agent.Logs().Read("w-1", 0, time.Time{})
		return len(es) > 0
	})

	// A follow: the kept line, then it ends when the workload is removed.
	f.mu.Lock()
	resp := f.desired
	f.mu.Unlock()
	resp.Generation++
	resp.Logs = []protocol.LogRequest{{Token: "tok-follow", Workload: "w-1", Follow: true}}
	f.setRaw(resp)
	waitFor(t, "the running line uploaded", func() bool {
		ls, _, _ := u.get("tok-follow")
		return len(ls) > 0 && strings.Contains(ls[0].Line, "w-1 attempt 1 is running") && ls[0].Stream == "system"
	})
	// The same request in a later answer starts nothing new.
	resp.Generation++
	f.setRaw(resp)
	waitFor(t, "the repeat seen", func() bool { return f.syncs() > 3 })
	if _, started, _ := u.get("tok-follow"); started != 1 {
		t.Errorf("started %d uploads for one token", started)
	}
	if _, _, ended := u.get("tok-follow"); ended {
		t.Fatal("the follow ended while the workload runs")
	}
	// Desired state saved on disk never holds log requests.
	h.agent.mu.Lock()
	if h.agent.state.Desired != nil && len(h.agent.state.Desired.Logs) != 0 {
		t.Errorf("saved desired state holds log requests")
	}
	h.agent.mu.Unlock()
	f.set(withMode(w, protocol.ModeRemove))
	waitCode(t, f, "w-1", protocol.CodeRemoved)
	waitFor(t, "the follow ended with the workload", func() bool { _, _, ended := u.get("tok-follow"); return ended })
}

func TestUploadEndsWhenTheHubStopsReading(t *testing.T) {
	f := newFakeHub()
	u := &uploadingHub{fakeHub: f, keep: 1, lines: map[string][]protocol.LogLine{}, started: map[string]int{}, ended: map[string]bool{}}
	h := startAgent(t, t.TempDir(), f, func(c *Config) { c.Transport = u })
	w := run("w-1", 1)
	w.Image = "sim:"
	f.set(w)
	waitCode(t, f, "w-1", protocol.CodeRunning)
	f.mu.Lock()
	resp := f.desired
	f.mu.Unlock()
	resp.Generation++
	resp.Logs = []protocol.LogRequest{{Token: "tok-1", Workload: "w-1", Follow: true}}
	f.setRaw(resp)
	waitFor(t, "the upload closed by the hub", func() bool { _, _, ended := u.get("tok-1"); return ended })
	waitFor(t, "the agent's upload finished", func() bool {
		h.agent.uploads.mu.Lock()
		defer h.agent.uploads.mu.Unlock()
		return len(h.agent.uploads.active) == 0
	})
}

func TestUploadOfAnUnknownWorkloadIsRefused(t *testing.T) {
	f := newFakeHub()
	u := &uploadingHub{fakeHub: f, keep: 1000, lines: map[string][]protocol.LogLine{}, started: map[string]int{}, ended: map[string]bool{}}
	dir := t.TempDir()
	h := startAgent(t, dir, f, func(c *Config) { c.Transport = u })
	f.mu.Lock()
	resp := f.desired
	f.mu.Unlock()
	resp.Generation++
	resp.Logs = []protocol.LogRequest{{Token: "tok-x", Workload: "w-nobody", Follow: true}}
	f.setRaw(resp)
	waitFor(t, "the request seen", func() bool { return f.syncs() > 2 })
	time.Sleep(100 * time.Millisecond)
	if _, started, _ := u.get("tok-x"); started != 0 {
		t.Errorf("an upload started for a workload the agent does not hold")
	}
	if es, _ := h.agent.Logs().Read("w-nobody", 0, time.Time{}); len(es) != 0 {
		t.Errorf("entries for nobody: %v", es)
	}
}

// replicaUploader is an uploadingHub whose transport can also upload to
// another hub replica's URL; it notes the URL each token went to.
type replicaUploader struct {
	*uploadingHub
	urls map[string]string
}

func (u *replicaUploader) UploadLogsTo(ctx context.Context, url, token string, body io.Reader) error {
	u.mu.Lock()
	u.urls[token] = url
	u.mu.Unlock()
	return u.UploadLogs(ctx, token, body)
}

// A request naming a replica's URL is uploaded there; one without goes
// to the hub; a URL that is not https:// or is too long is refused with a
// warning, and nothing is uploaded for it.
func TestUploadGoesToTheReplicaThatAsked(t *testing.T) {
	f := newFakeHub()
	u := &replicaUploader{uploadingHub: &uploadingHub{fakeHub: f, keep: 1, lines: map[string][]protocol.LogLine{}, started: map[string]int{}, ended: map[string]bool{}},
		urls: map[string]string{}}
	var logs syncbuf.Buffer
	h := startAgent(t, t.TempDir(), f, func(c *Config) {
		c.Transport = u
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	w := run("w-1", 1)
	w.Image = "sim:"
	f.set(w)
	waitCode(t, f, "w-1", protocol.CodeRunning)
	waitFor(t, "the running line kept", func() bool {
		es, _ := h.agent.Logs().Read("w-1", 0, time.Time{})
		return len(es) > 0
	})
	f.mu.Lock()
	resp := f.desired
	f.mu.Unlock()
	resp.Generation++
	const replica = "https://hub-a.test:8443"
	resp.Logs = []protocol.LogRequest{
		{Token: "tok-replica", Workload: "w-1", URL: replica},
		{Token: "tok-hub", Workload: "w-1"},
		{Token: "tok-plain", Workload: "w-1", URL: "http://hub-a.test:8443"},
		{Token: "tok-long", Workload: "w-1", URL: "https://" + strings.Repeat("a", protocol.MaxHubURLLen)},
	}
	f.setRaw(resp)
	waitFor(t, "both uploads", func() bool {
		_, _, a := u.get("tok-replica")
		_, _, b := u.get("tok-hub")
		return a && b
	})
	u.mu.Lock()
	urls := maps.Clone(u.urls)
	u.mu.Unlock()
	if urls["tok-replica"] != replica {
		t.Errorf("uploaded to %q, want %s", urls["tok-replica"], replica)
	}
	if to, ok := urls["tok-hub"]; ok {
		t.Errorf("a request without a URL uploaded to %q, want the hub", to)
	}
	for _, tok := range []string{"tok-plain", "tok-long"} {
		if _, started, _ := u.get(tok); started != 0 {
			t.Errorf("%s: uploaded to a refused URL", tok)
		}
	}
	if n := strings.Count(logs.String(), "not https:// or is too long"); n < 2 {
		t.Errorf("%d warnings for two refused URLs:\n%s", n, logs.String())
	}
}
