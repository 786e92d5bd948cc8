//go:build !linux

package serve

import (
	"net"
	"time"
)

// kernelSignOfLife: elsewhere the kernel does not say when a peer last
// answered, so the hub pings over HTTP/2 (PingAfter) and a held poll's
// sign of life is the last byte read.
const kernelSignOfLife = false

func sinceLastAck(net.Conn) (time.Duration, bool) { return 0, false }

func boundUnacked(net.Conn, time.Duration) {}
