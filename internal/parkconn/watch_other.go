//go:build !linux

package parkconn

import (
	"errors"
	"fmt"
	"net"
)

// Watcher is Linux's (epoll); elsewhere NewWatcher fails with
// errors.ErrUnsupported, and a parked connection's peer is noticed by
// PeerGone, on a sweep.
type Watcher struct{}

// NewWatcher fails here.
func NewWatcher() (*Watcher, error) {
	return nil, fmt.Errorf("parkconn: no watcher on this system: %w", errors.ErrUnsupported)
}

func (w *Watcher) Watch(net.Conn, func()) (func(), error) {
	return nil, fmt.Errorf("parkconn: no watcher on this system: %w", errors.ErrUnsupported)
}

func (w *Watcher) Watching() int { return 0 }

func (w *Watcher) Close() error { return nil }
