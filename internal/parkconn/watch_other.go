//go:build !linux

package parkconn

import (
	"errors"
	"net"
)

// Watcher is Linux's (epoll); elsewhere NewWatcher fails, and a parked
// connection's peer is noticed by PeerGone, on a sweep.
type Watcher struct{}

// NewWatcher fails here.
func NewWatcher() (*Watcher, error) {
	return nil, errors.New("parkconn: no watcher on this system")
}

func (w *Watcher) Watch(net.Conn, func()) (func(), error) {
	return nil, errors.New("parkconn: no watcher on this system")
}

func (w *Watcher) Watching() int { return 0 }

func (w *Watcher) Close() error { return nil }
