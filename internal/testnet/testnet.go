// Package testnet gives tests host ports to publish on.
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// Below the kernel's ephemeral range (32768–60999 on Linux), so the
// source port of some other connection on this busy machine cannot take
// the port between the check and its use, as one from 127.0.0.1:0 can.
const lowPort, highPort = 20000, 32000

// FreePort returns a TCP port that nothing listens on, on any address,
// right now, from below the ephemeral range.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := lowPort + rand.IntN(highPort-lowPort)
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}
