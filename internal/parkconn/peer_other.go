//go:build !unix

package parkconn

import "net"

// PeerGone cannot peek here: a parked connection stays until its hold ends.
func PeerGone(net.Conn) bool { return false }
