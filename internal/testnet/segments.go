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

// BacklogDrops reads the host's count of packets dropped because a CPU's
// input backlog was full (Linux; /proc/net/softnet_stat), or -1. Loopback
// delivers through that backlog (net.core.netdev_max_backlog, 1,000 a CPU
// by default), so a burst of more packets than that loses some.
func BacklogDrops() int64 {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		return -1
	}
	return sumBacklogDrops(string(b))
}

// sumBacklogDrops sums the second column (hexadecimal) of softnet_stat's
// rows, one per CPU; -1 if a row has none.
func sumBacklogDrops(stat string) int64 {
	var sum int64
	for line := range strings.SplitSeq(stat, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return -1
		}
		v, err := strconv.ParseInt(f[1], 16, 64)
		if err != nil {
			return -1
		}
		sum += v
	}
	return sum
}
