package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/httpapi"
	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// logBench is a networked hub on loopback (mutual TLS for agents, the
// admin API over plain HTTP) with machine m-1 holding workload w-log.
type logBench struct {
	h         *hub.Hub
	st        store.Store
	authority *ca.CA
	url       string
	admin     *adminapi.Client
}

func startLogBench(b *testing.B) *logBench {
	_, authority, st := serve.NewCAAndStore(b)
	h, err := hub.New(context.Background(), hub.Config{Store: st, CA: authority, Logger: discard, PollTimeout: 2 * time.Second, AllowSim: true})
	if err != nil {
		b.Fatal(err)
	}
	h.EnsureTenant(context.Background(), "acme")
	if err := h.RegisterMachine(context.Background(), "m-1", "m-1", "acme", "local"); err != nil {
		b.Fatal(err)
	}
	server, err := authority.ServerCertificate([]string{"127.0.0.1"})
	if err != nil {
		b.Fatal(err)
	}
	// Each machine's request bucket lifted: the benchmark syncs faster
	// than an agent would.
	srv := serve.NewServer(serve.Config{Hub: h, CA: authority, Certificate: server, Logger: discard, PollTimeout: 2 * time.Second,
		Limits: serve.Limits{Rate: 1e6, Burst: 1e6}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	api := httpapi.New(h, nil, discard)
	adm := httptest.NewServer(api.AdminHandler("tok"))
	b.Cleanup(adm.Close)
	lb := &logBench{h: h, st: st, authority: authority, url: "https://" + ln.Addr().String(), admin: &adminapi.Client{BaseURL: adm.URL, Token: "tok"}}
	return lb
}

// place records workload id on machine m as running, straight in the
// store: the benchmark is of the relay, not of placement.
func (lb *logBench) place(b *testing.B, id, m string) {
	now := time.Now()
	err := lb.st.Update(context.Background(), func(tx store.Tx) error {
		return tx.CreateWorkload(store.Workload{ID: id, Name: id, Tenant: "acme", Kind: protocol.KindContainer, Class: "cpu-1",
			Region: "local", State: store.StateRunning, Machine: m, Driver: "sim", Attempt: 1, Created: now, Since: now})
	})
	if err != nil {
		b.Fatal(err)
	}
}

// agentLoop syncs as the machine of tr and answers every log request with
// an upload of lines of lineBytes each, as fast as the hub takes them,
// until ctx ends.
func agentLoop(ctx context.Context, tr *hubclient.HTTPS, lineBytes int) {
	var gen int64
	for ctx.Err() == nil {
		resp, err := tr.Sync(ctx, &protocol.SyncRequest{ProtocolVersion: protocol.Version, Generation: gen, StoreID: "x",
			Inventory: &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 4, MemoryMB: 4096, Drivers: []string{"sim"}}})
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for _, r := range resp.Logs {
			go func() {
				pr, pw := io.Pipe()
				go func() {
					l, _ := json.Marshal(protocol.LogLine{Time: time.Now().UTC(), Stream: "stdout", Line: strings.Repeat("x", lineBytes)})
					line := append(l, '\n')
					block := []byte(strings.Repeat(string(line), 64<<10/len(line)))
					for {
						if _, err := pw.Write(block); err != nil {
							return
						}
					}
				}()
				tr.UploadLogs(ctx, r.Token, pr)
				pr.Close()
			}()
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLogThroughput streams one workload's output from an agent over
// its mutual-TLS upload through the hub to a reader of the admin API
// (`workload logs --follow`), all on loopback in one process, the rate
// limit lifted. MB/s is the bytes of output lines read; cpu-ms/MB is this
// whole process's CPU (agent, hub and reader together: an upper bound for
// the hub's) per MB.
func BenchmarkLogThroughput(b *testing.B) {
	lb := startLogBench(b)
	lb.h.SetLogLimits(0, 1<<40)
	lb.place(b, "w-log", "m-1")
	tr := benchTransport(b, lb.authority, lb.url, "m-1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go agentLoop(ctx, tr, 200)
	time.Sleep(100 * time.Millisecond) // its first sync marks it online
	const want = 256 << 20
	b.ResetTimer()
	for b.Loop() {
		var n int64
		cpu0, t0 := cpuTime(), time.Now()
		rctx, rcancel := context.WithCancel(ctx)
		err := lb.admin.Logs(rctx, "w-log", adminapi.LogOptions{Follow: true}, func(l protocol.LogLine) error {
			if n += int64(len(l.Line)); n >= want {
				rcancel()
			}
			return nil
		})
		rcancel()
		if n < want {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		secs := time.Since(t0).Seconds()
		b.ReportMetric(float64(n)/secs/1e6, "MB/s")
		b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/(float64(n)/1e6), "cpu-ms/MB")
	}
}

// BenchmarkSyncLatencyUnderLogs is the p99 latency of syncs of 20 other
// machines answered at once (each asks with a stale generation), without
// a workload's output streaming through the same hub, with one limited to
// 50 MB/s, and with one at the default per-machine limit, in one process
// on loopback.
func BenchmarkSyncLatencyUnderLogs(b *testing.B) {
	for _, rate := range []int{0, 50 << 20, hub.DefaultLogRate} {
		withLogs := rate > 0
		b.Run(fmt.Sprintf("log-limit-MBps=%d", rate>>20), func(b *testing.B) {
			lb := startLogBench(b)
			lb.h.SetLogLimits(0, rate)
			lb.place(b, "w-log", "m-1")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var streamed atomic.Int64
			if withLogs {
				go agentLoop(ctx, benchTransport(b, lb.authority, lb.url, "m-1"), 200)
				time.Sleep(100 * time.Millisecond)
				go lb.admin.Logs(ctx, "w-log", adminapi.LogOptions{Follow: true}, func(l protocol.LogLine) error {
					streamed.Add(int64(len(l.Line)))
					return nil
				})
			}
			const machines = 20
			trs := make([]*hubclient.HTTPS, machines)
			for i := range trs {
				id := fmt.Sprintf("m-o%02d", i)
				if err := lb.h.RegisterMachine(ctx, id, id, "acme", "local"); err != nil {
					b.Fatal(err)
				}
				trs[i] = benchTransport(b, lb.authority, lb.url, id)
			}
			for b.Loop() {
				var mu sync.Mutex
				var lat []time.Duration
				s0, t0 := streamed.Load(), time.Now()
				var wg sync.WaitGroup
				for _, tr := range trs {
					wg.Go(func() {
						for time.Since(t0) < 3*time.Second {
							start := time.Now()
							if _, err := tr.Sync(ctx, &protocol.SyncRequest{ProtocolVersion: protocol.Version}); err != nil {
								b.Error(err)
								return
							}
							mu.Lock()
							lat = append(lat, time.Since(start))
							mu.Unlock()
							time.Sleep(20 * time.Millisecond)
						}
					})
				}
				wg.Wait()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(len(lat)), "syncs")
				b.ReportMetric(float64(streamed.Load()-s0)/time.Since(t0).Seconds()/1e6, "log-MB/s")
			}
		})
	}
}
