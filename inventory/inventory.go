// Package inventory finds out what a machine has (CPUs, memory, GPUs, Docker,
// virtualization) for the agent to report to the hub. Probing never fails:
// what cannot be found is left out and said in a Note.
//
// The parsers and the sources they read (sysfs, /proc, command output,
// sysctl values) sit in OS-independent files so that they are tested on any
// host; probe_linux.go and probe_darwin.go only pick the probers and supply
// the real sysctl.
package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/protocol"
)

// Options configures a Prober. The zero value probes the live machine.
type Options struct {
	Logger *slog.Logger
	// Root is the filesystem root under which sysfs, /proc, /dev and /etc
	// are read; "" means "/". Tests point it at testdata trees; an agent in
	// a container may point it at the host's root.
	Root string
	// CommandTimeout bounds each external command and each call to the
	// Docker Engine; 0 means DefaultCommandTimeout.
	CommandTimeout time.Duration
	// DockerHost is the engine's address: a socket path, "unix://PATH" or
	// "tcp://HOST:PORT" (plain HTTP). "" means /var/run/docker.sock under
	// Root, and then a missing socket only means there is no Docker.
	DockerHost string
}

// DefaultCommandTimeout bounds an external command when Options does not.
const DefaultCommandTimeout = 2 * time.Second

// maxNote bounds one note: the hub truncates text anyway, and a note is for
// an operator to see why a field is missing, not a log.
const maxNote = 200

// Prober probes the machine. It is safe for concurrent use.
type Prober struct {
	log     *slog.Logger
	root    string
	timeout time.Duration
	docker  dockerEndpoint

	// The fields below are fixed by New for the live machine; tests in this
	// package replace them.
	goos, goarch string
	live         bool          // probing "/" of this machine, not a tree
	numCPU       func() int    // CPUs this process may run on; nil when not live
	run          runner        // runs external commands
	probers      []prober      // the platform's probers, run concurrently
	clock        clock.Clock   // drives Watch
	hostname     func() string // live fallback for the hostname
	rec          recorder      // set by Capture: keeps what probes read
}

// prober finds one part of the inventory. It returns a function that writes
// what it found, so that probers run concurrently yet results are applied
// in a fixed order; an error (possibly joined) becomes Notes, and a prober
// may return both.
type prober struct {
	name  string
	probe func(ctx context.Context, p *Prober) (apply func(*protocol.Inventory), err error)
}

// New returns a Prober for the machine it runs on.
func New(opts Options) *Prober {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root := opts.Root
	if root == "" {
		root = "/"
	}
	root = filepath.Clean(root)
	timeout := opts.CommandTimeout
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	p := &Prober{
		log:     log,
		root:    root,
		timeout: timeout,
		docker:  parseDockerHost(opts.DockerHost, root),
		goos:    runtime.GOOS,
		goarch:  runtime.GOARCH,
		live:    root == "/",
		run:     execRunner,
		probers: platformProbers(nil),
		clock:   clock.Real{},
	}
	if p.live {
		// runtime.NumCPU is the affinity mask, so it already honours a
		// cpuset or taskset; a tree has no process to ask.
		p.numCPU = runtime.NumCPU
		p.hostname = osHostname
	}
	return p
}

// Probe returns the inventory. It never fails: a part that cannot be probed
// is left out and explained in Notes. GPUs and Docker runtimes are sorted so
// that two probes of an unchanged machine are equal.
func (p *Prober) Probe(ctx context.Context) protocol.Inventory {
	start := time.Now()
	type result struct {
		apply func(*protocol.Inventory)
		err   error
	}
	results := make([]result, len(p.probers))
	var wg sync.WaitGroup
	for i, pr := range p.probers {
		wg.Go(func() {
			apply, err := pr.probe(ctx, p)
			results[i] = result{apply, err}
		})
	}
	wg.Wait()

	inv := protocol.Inventory{OS: p.goos, Arch: p.goarch}
	for i, r := range results {
		if r.apply != nil {
			r.apply(&inv)
		}
		for _, err := range flatten(r.err) {
			msg := err.Error()
			if !p.live {
				// Paths are reported as they are on the probed machine.
				msg = strings.ReplaceAll(msg, p.root, "")
			}
			// A joined error from deeper down prints one part a line.
			msg = strings.ReplaceAll(msg, "\n", "; ")
			note := truncate(p.probers[i].name+": "+msg, maxNote)
			inv.Notes = append(inv.Notes, note)
		}
	}
	canonicalize(&inv)
	p.log.Debug("inventory probed", "took", time.Since(start), "gpus", len(inv.GPUs), "notes", inv.Notes)
	return inv
}

// canonicalize orders what has no natural order, so that equal machines give
// equal inventories.
func canonicalize(inv *protocol.Inventory) {
	slices.SortStableFunc(inv.GPUs, func(a, b protocol.GPU) int {
		if c := strings.Compare(a.Vendor, b.Vendor); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if inv.Docker != nil {
		slices.Sort(inv.Docker.Runtimes)
	}
}

// flatten splits a joined error into its parts.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// path joins rel (an absolute path on the probed machine) onto the root.
func (p *Prober) path(rel string) string { return filepath.Join(p.root, rel) }

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n]
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// errAbsent marks a source that is not there at all (no nvidia-smi, no
// socket): a normal state of a machine, not worth a note.
var errAbsent = errors.New("absent")

// absent wraps err so that errors.Is(err, errAbsent) holds.
func absent(what string) error { return fmt.Errorf("%s: %w", what, errAbsent) }
