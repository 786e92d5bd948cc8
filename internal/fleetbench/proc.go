package fleetbench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"einsora.dev/edge/hubclient"
)

// cpuTime is the CPU time process pid's threads have used, in
// nanoseconds from the scheduler (/proc/PID/task/*/schedstat): the 10 ms
// ticks of /proc/PID/stat are too coarse for one change. A thread that
// exited takes its time with it; Go's threads rarely exit.
func cpuTime(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("read the CPU time of process %d: no threads in /proc", pid)
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q", t, b)
		}
		sum += ns
	}
	return time.Duration(sum), nil
}

// rssKiB is process pid's resident set size.
func rssKiB(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read the memory of process %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// RaiseOpenFiles raises the soft limit of open files to the hard limit
// and returns it; children (the hub) inherit it.
func RaiseOpenFiles() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, fmt.Errorf("read the open-file limit: %w", err)
	}
	r.Cur = r.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, fmt.Errorf("raise the open-file limit to %d: %w", r.Max, err)
	}
	return r.Cur, nil
}

// sourceAddr is agent i's loopback source address: 127.1.x.y, so no
// address runs out of ports and per-address limits see one machine each.
func sourceAddr(i int) net.IP {
	return net.IPv4(127, 1+byte(i/62500), byte(i/250%250), byte(1+i%250))
}

// keepAliveIdle is agent i's keepalive idle time: an agent's own
// (hubclient.KeepAliveIdle), spread a minute either way, a second an
// agent. Real agents each have a host of their own; here they share one
// kernel, whose timer wheel fires timers this long in slots of 16 s (at
// 250 Hz). With one idle time, agents that connected together probe
// together: thousands of probes in one burst overflow loopback's input
// backlog (1,000 packets a CPU), and connections whose probes were lost
// time out, so the bench would measure its host instead of the hub.
// Spread over seven slots and more, the bursts fit; the probes a hold
// sends are the same on average.
func keepAliveIdle(i int) time.Duration {
	return hubclient.KeepAliveIdle - time.Minute + time.Duration(i%121)*time.Second
}

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// meter counts the fleet's dials and bytes on the wire (TLS records with
// their headers, as TCP carries them; not TCP/IP headers).
type meter struct {
	dials atomic.Int64
	bytes atomic.Int64
}

// dialer dials from agent i's source address, counting.
func (m *meter) dialer(i int) dialFunc {
	// An agent's keepalives, not Go's default (every 15 s), which would
	// triple the idle traffic on the wire.
	d := hubclient.NewDialerIdle(keepAliveIdle(i))
	d.LocalAddr = &net.TCPAddr{IP: sourceAddr(i)}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("fleetbench dials loopback only, not %s", addr)
		}
		m.dials.Add(1)
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: c, n: &m.bytes}, nil
	}
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// liveHeap is a server's live heap, in bytes: the HeapAlloc its heap
// profile reports (GET base/debug/pprof/heap?gc=1&debug=1) just after the
// collection that asking for it runs. RSS at one moment follows the
// collector's phase, and what is freed goes back to the kernel over
// minutes; the live heap after a collection is what the server keeps.
// token, when set, is sent as a bearer token (the hub's admin API).
func liveHeap(ctx context.Context, base, token string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/debug/pprof/heap?gc=1&debug=1", nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read the live heap: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("read the live heap: %s answered %s", req.URL.Redacted(), resp.Status)
	}
	// The profile's stacks come first, the runtime's memory statistics
	// last; a line is short.
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read the live heap: %w", err)
	}
	return 0, fmt.Errorf("read the live heap: %s has no HeapAlloc line", req.URL.Redacted())
}
