package testnet

import (
	"os"
	"strconv"
	"strings"
)

// WireHeader is what each TCP segment adds on the wire over IPv4: 20 B of
// IP, 20 B of TCP and 12 B of its timestamp option.
const WireHeader = 52

// TCPOutSegs reads the host's count of TCP segments sent (Linux), or -1.
// With both ends of a connection on the host, every segment is counted
// once, by its sender.
func TCPOutSegs() int64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return -1
	}
	var head []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		for i, name := range head {
			if name == "OutSegs" && i < len(f) {
				v, err := strconv.ParseInt(f[i], 10, 64)
				if err != nil {
					return -1
				}
				return v
			}
		}
	}
	return -1
}
