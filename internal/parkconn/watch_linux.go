//go:build linux

package parkconn

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
)

// Watcher tells when the peer of a parked connection has gone (closed,
// reset, stopped answering keepalives) or sent anything, the moment the
// kernel knows: one epoll set of its own, waited on by one goroutine, for
// every connection it watches, where a read on each would keep a
// goroutine on each.
type Watcher struct {
	epfd int
	// wake is a pipe whose read end is in the set: Close writes to it.
	wake [2]int

	// mu guards the following fields.
	mu     sync.Mutex
	next   uint64
	gone   map[uint64]func()
	closed bool
}

// wakeID is the pipe's key in the set; connections take the others.
const wakeID = 0

// NewWatcher starts a Watcher.
func NewWatcher() (*Watcher, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("parkconn: epoll: %w", err)
	}
	w := &Watcher{epfd: epfd, next: wakeID + 1, gone: map[uint64]func(){}}
	if err := syscall.Pipe2(w.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("parkconn: pipe: %w", err)
	}
	ev := event(syscall.EPOLLIN, wakeID)
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, w.wake[0], &ev); err != nil {
		w.closeFDs()
		return nil, fmt.Errorf("parkconn: epoll: %w", err)
	}
	go w.run()
	return w, nil
}

// event is an epoll event for events, keyed by id (epoll's data word).
func event(events uint32, id uint64) syscall.EpollEvent {
	return syscall.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

func idOf(ev *syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// Watch calls gone, once, on the Watcher's goroutine, when c's peer has
// gone or sent anything; gone must not block. Call unwatch before c is
// read, given back or closed: once it returns, gone is not called.
func (w *Watcher) Watch(c net.Conn, gone func()) (unwatch func(), err error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errors.New("parkconn: the connection has no file descriptor")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	// The set's descriptor is used under mu only: run closes it under mu.
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, net.ErrClosed
	}
	id := w.next
	w.next++
	var ctlErr error
	err = rc.Control(func(fd uintptr) {
		// One-shot: a peer that sent something would wake the set
		// again and again until read.
		ev := event(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLONESHOT, id)
		ctlErr = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err = errors.Join(err, ctlErr); err != nil {
		return nil, fmt.Errorf("parkconn: watch: %w", err)
	}
	w.gone[id] = gone
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.gone, id)
		if !w.closed {
			rc.Control(func(fd uintptr) { syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil) })
		}
	}, nil
}

// Watching is how many connections the Watcher watches now.
func (w *Watcher) Watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.gone)
}

func (w *Watcher) run() {
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(w.epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		for i := range events[:n] {
			// A connection's gone runs outside mu: it unwatches.
			id := idOf(&events[i])
			if id == wakeID {
				w.mu.Lock()
				w.closeFDs()
				w.mu.Unlock()
				return
			}
			w.mu.Lock()
			gone := w.gone[id]
			delete(w.gone, id)
			w.mu.Unlock()
			if gone != nil {
				gone()
			}
		}
	}
}

// Close stops the Watcher; the connections it watched are their owners'.
func (w *Watcher) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	_, err := syscall.Write(w.wake[1], []byte{0})
	return err
}

func (w *Watcher) closeFDs() {
	syscall.Close(w.wake[0])
	syscall.Close(w.wake[1])
	syscall.Close(w.epfd)
}
