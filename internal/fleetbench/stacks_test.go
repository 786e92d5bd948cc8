package fleetbench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hubclient"
)

// A held poll costs the hub three goroutines: HTTP/2's loop for its
// connection and the connection's frame reader (net/http's, about 3.7
// and 2.0 KB of stack in use where they wait, Go 1.26) and the handler,
// waiting in Sync under this hub's middleware. A collection halves a
// waiting goroutine's stack only while it uses less than a quarter of it,
// counting 800 B of guard, so a handler that uses more than 3.3 KB keeps
// 16 KiB where it could keep 8. Its frames are kept small for that: it
// uses about 2.5 KB (docs/performance.md, "A held poll's stack"). The
// real binary, built without the race detector, as it ships; the stack in
// use is what its collections scanned, which no stack pool's rounding
// blurs.
func TestHeldPollsStacksShrinkTo32KiB(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts einsora-hub")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "einsora-hub")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/einsora-hub").CombinedOutput(); err != nil {
		t.Fatalf("build einsora-hub: %v\n%s", err, out)
	}
	h := newHubTarget(bin, filepath.Join(dir, "hub"), "", 1, nil, 0)
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
	defer h.stop()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const polls = 128
	var m meter
	creds, _, err := h.creds(ctx, polls, &m)
	if err != nil {
		t.Fatal(err)
	}
	api := h.reps[0].api
	before := stacksAfterCollections(ctx, t, api)

	// HTTP/2: over HTTP/1.1 the hub parks held polls, with no stack.
	f, err := newFleet(h.urls(), creds, hubclient.HTTPSConfig{HTTP2: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f.start()
	defer f.stop()
	if n, ok := f.allSyncedSince(start, time.Minute); !ok {
		t.Fatalf("%d of %d agents synced", n, polls)
	}
	for {
		n, err := longPolls(ctx, api)
		if err != nil {
			t.Fatal(err)
		}
		if n == polls {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the hub holds %d polls, want %d", n, polls)
		}
		time.Sleep(20 * time.Millisecond)
	}
	after := stacksAfterCollections(ctx, t, api)
	used := float64(after.scanned-before.scanned) / polls
	kept := float64(after.inuse-before.inuse) / polls / 1024
	t.Logf("a held poll: %.0f B of stack in use, %.1f KiB of stack spans", used, kept)
	// 3.7 + 2.0 KB of net/http's and at most 3.3 KB of the handler's is
	// 9.0 KB; 8.8 leaves the handler room for nothing more.
	if used > 8800 {
		t.Errorf("a held poll uses %.0f B of stack, want at most 8,800: its handler's frames grew, and its stack stays at 16 KiB (docs/performance.md, \"A held poll's stack\")", used)
	}
}

// stacks is what a hub's /metrics says of its goroutines' stacks.
type stacks struct {
	scanned, inuse int64 // go_gc_scan_stack_bytes, go_memstats_stack_inuse_bytes
}

// stacksAfterCollections collects the hub's garbage six times, through its
// profile endpoint, and reads its stacks from /metrics. A collection
// halves a waiting goroutine's stack at most once, and a handler's stack
// grew to tens of KiB in the sync that made it, so it takes several to
// shrink.
func stacksAfterCollections(ctx context.Context, t *testing.T, api *adminapi.Client) stacks {
	t.Helper()
	for range 6 {
		if err := adminGet(ctx, api, "/debug/pprof/heap?gc=1", nil); err != nil {
			t.Fatal(err)
		}
	}
	st := stacks{-1, -1}
	into := map[string]*int64{"go_gc_scan_stack_bytes ": &st.scanned, "go_memstats_stack_inuse_bytes ": &st.inuse}
	err := adminGet(ctx, api, "/metrics", func(sc *bufio.Scanner) error {
		for sc.Scan() {
			for name, to := range into {
				if v, ok := strings.CutPrefix(sc.Text(), name); ok {
					f, err := strconv.ParseFloat(v, 64)
					if err != nil {
						return fmt.Errorf("%s%s: %w", name, v, err)
					}
					*to = int64(f)
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.scanned < 0 || st.inuse < 0 {
		t.Fatalf("the hub's /metrics lacks go_gc_scan_stack_bytes or go_memstats_stack_inuse_bytes: %+v", st)
	}
	return st
}

// adminGet GETs path of the admin API with its token and hands read the
// body's lines.
func adminGet(ctx context.Context, api *adminapi.Client, path string, read func(*bufio.Scanner) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api.BaseURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+api.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if read == nil {
		return nil
	}
	return read(bufio.NewScanner(resp.Body))
}
