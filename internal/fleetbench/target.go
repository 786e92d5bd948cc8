package fleetbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"einsora.dev/edge/protocol"
)

// target is what the fleet syncs with: real einsora-hub serve processes
// (one, or replicas on one store), or the stock Go TLS long-poll baseline.
type target interface {
	name() string
	// start starts the server processes on new ports.
	start() error
	// crash ends process i with SIGKILL; restart starts it again on the
	// same ports; stop ends them all.
	crash(i int)
	restart(i int) error
	stop()
	// procs are the server processes, whose CPU and memory are summed.
	procs() []*process
	// urls are the processes' agent URLs; machine i syncs with
	// urls[i mod len], and fails over to the others in turn.
	urls() []string
	// creds makes n machines' client certificates; enrol says how long
	// the enrolments took (zero when there is no enrolment to measure).
	creds(ctx context.Context, n int, m *meter) (cs []cred, enrol time.Duration, err error)
	// change makes one change that wakes one machine, the k-th of a
	// cycle of create, park, run, through process via's admin API; it
	// returns the workload and its mode.
	change(ctx context.Context, k, via int) (id string, mode protocol.Mode, err error)
	// burst gives each of n machines a workload of its own.
	burst(ctx context.Context, n int) (ids []string, err error)
	// reached is how many machines synced with the server since t (the
	// baseline) or have a poll held now (the hub), by the server's own
	// account: a held poll never answers, so the agents cannot tell. It
	// is every machine once all are back.
	reached(ctx context.Context, since time.Time) (int, error)
	// liveHeap is the server processes' live heap after a collection,
	// summed, in bytes.
	liveHeap(ctx context.Context) (int64, error)
}

// process is a server process whose first stdout line says where it
// listens.
type process struct {
	cmd  *exec.Cmd
	logf *os.File
	// started is when it started; its collections are traced in its log
	// from logFrom on (see collections).
	started time.Time
	logFrom int64
}

// startProcess starts cmd and returns its first stdout line that
// contains marker, within a minute.
func startProcess(cmd *exec.Cmd, logPath, marker string) (*process, string, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = logf
	cmd.SysProcAttr = serverProcAttr()
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = withGCTrace(cmd.Env)
	logFrom, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		logf.Close()
		return nil, "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, "", err
	}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, logf: logf, started: started, logFrom: logFrom}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), marker) {
				select {
				case lines <- sc.Text():
				default:
				}
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-lines:
		return p, l, nil
	case <-time.After(time.Minute):
		p.kill()
		return nil, "", fmt.Errorf("%s did not say it was ready within a minute; see %s", cmd.Path, logPath)
	}
}

func (p *process) kill() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	p.logf.Close()
}

// fieldAfter returns the word after prefix in line, without a trailing
// comma.
func fieldAfter(line, prefix string) string {
	_, rest, ok := strings.Cut(line, prefix)
	if !ok {
		return ""
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return ""
	}
	return strings.TrimSuffix(f[0], ",")
}
