package dashboard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

// benchDashboard is a dashboard over a real hub whose SQLite store holds n
// machines, each with an inventory, and a signed-in session's cookie.
func benchDashboard(b *testing.B, n int) (*Dashboard, *hub.Hub, *http.Cookie) {
	b.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "hub.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	now := time.Now()
	err = st.Update(ctx, func(tx store.Tx) error {
		for i := range n {
			err := tx.PutMachine(store.Machine{
				ID: fmt.Sprintf("m-%06d", i), Name: fmt.Sprintf("edge-%d", i), Owner: "acme", Region: fmt.Sprintf("r%d", i%4),
				OS: "linux", Arch: "amd64", Generation: 7, AppliedGeneration: 7, LastSync: now, AgentVersion: "v1.0.0",
				Registered: now, CertExpires: now.Add(30 * 24 * time.Hour),
				Inventory: &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 16, MemoryMB: 65536, Drivers: []string{"docker", "sim"},
					GPUs: []protocol.GPU{{Vendor: "nvidia", Model: "L4", ID: "0"}}},
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	h, err := hub.New(ctx, hub.Config{AllowSim: true, Store: st, Clock: clock.Real{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	d := New(Config{Hub: h, AdminToken: "t", Version: "v1.0.0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	id, _ := d.table.newSession(time.Now())
	return d, h, &http.Cookie{Name: cookieName, Value: id}
}

// BenchmarkMachinesPage is the server time of one page of the machines
// list (the first paint, whole page) and of the fragment the page polls,
// at 100 and 10,000 machines, beside reading every machine, which the
// page never does. docs/performance.md has the figures.
func BenchmarkMachinesPage(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		d, h, cookie := benchDashboard(b, n)
		b.Run(fmt.Sprintf("read-all/machines=%d", n), func(b *testing.B) {
			for b.Loop() {
				if ms, err := h.Machines(context.Background()); err != nil || len(ms) != n {
					b.Fatal(len(ms), err)
				}
			}
		})
		for _, c := range []struct{ name, query string }{{"page", "?after=m-000049"}, {"fragment", "?after=m-000049&frag=1"}} {
			b.Run(fmt.Sprintf("%s/machines=%d", c.name, n), func(b *testing.B) {
				var bytes int
				for b.Loop() {
					rec := httptest.NewRecorder()
					req := httptest.NewRequest(http.MethodGet, Prefix+c.query, nil)
					req.AddCookie(cookie)
					d.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("status %d", rec.Code)
					}
					bytes = rec.Body.Len()
				}
				b.ReportMetric(float64(bytes), "bytes/page")
			})
		}
	}
}
