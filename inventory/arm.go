package inventory

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// armCore is one processor of an arm64 /proc/cpuinfo.
type armCore struct{ implementer, part string }

// armPart is a known core: its name and a rough rank of its size, so that
// on big.LITTLE chips the big cores are named first.
type armPart struct {
	name string
	rank int
}

// armParts names cores by "implementer/part" as /proc/cpuinfo prints them
// (the kernel's arch/arm64/include/asm/cputype.h). Parts not here are shown
// by their numbers.
var armParts = map[string]armPart{
	// Arm's own cores.
	"0x41/0xd04": {"Cortex-A35", 1},
	"0x41/0xd03": {"Cortex-A53", 1},
	"0x41/0xd05": {"Cortex-A55", 2},
	"0x41/0xd46": {"Cortex-A510", 2},
	"0x41/0xd80": {"Cortex-A520", 2},
	"0x41/0xd07": {"Cortex-A57", 3},
	"0x41/0xd08": {"Cortex-A72", 4}, // Raspberry Pi 4, Graviton1
	"0x41/0xd09": {"Cortex-A73", 4},
	"0x41/0xd0a": {"Cortex-A75", 5},
	"0x41/0xd0b": {"Cortex-A76", 6}, // Raspberry Pi 5
	"0x41/0xd0d": {"Cortex-A77", 6},
	"0x41/0xd41": {"Cortex-A78", 7},
	"0x41/0xd47": {"Cortex-A710", 7},
	"0x41/0xd4d": {"Cortex-A715", 7},
	"0x41/0xd81": {"Cortex-A720", 7},
	"0x41/0xd44": {"Cortex-X1", 8},
	"0x41/0xd48": {"Cortex-X2", 8},
	"0x41/0xd4e": {"Cortex-X3", 8},
	"0x41/0xd82": {"Cortex-X4", 8},
	"0x41/0xd0c": {"Arm Neoverse-N1", 6}, // Graviton2, Ampere Altra
	"0x41/0xd49": {"Arm Neoverse-N2", 7},
	"0x41/0xd40": {"Arm Neoverse-V1", 8}, // Graviton3
	"0x41/0xd4f": {"Arm Neoverse-V2", 8}, // Graviton4, Grace
	"0x41/0xd84": {"Arm Neoverse-V3", 8},
	"0x41/0xd8e": {"Arm Neoverse-N3", 7},
	// Others' cores.
	"0xc0/0xac3": {"AmpereOne", 7},
	"0xc0/0xac4": {"AmpereOne", 7},
	"0x46/0x001": {"Fujitsu A64FX", 7},
	"0x43/0x0af": {"Cavium ThunderX2", 5},
	"0x42/0x516": {"Broadcom Vulcan", 5},
	// Apple's cores under Asahi Linux: efficiency, then performance.
	"0x61/0x022": {"Apple Icestorm", 2}, // M1
	"0x61/0x023": {"Apple Firestorm", 8},
	"0x61/0x024": {"Apple Icestorm", 2}, // M1 Pro
	"0x61/0x025": {"Apple Firestorm", 8},
	"0x61/0x028": {"Apple Icestorm", 2}, // M1 Max
	"0x61/0x029": {"Apple Firestorm", 8},
	"0x61/0x032": {"Apple Blizzard", 2}, // M2
	"0x61/0x033": {"Apple Avalanche", 8},
	"0x61/0x034": {"Apple Blizzard", 2}, // M2 Pro
	"0x61/0x035": {"Apple Avalanche", 8},
	"0x61/0x038": {"Apple Blizzard", 2}, // M2 Max
	"0x61/0x039": {"Apple Avalanche", 8},
}

// maxArmClusters bounds the clusters named: no chip has more than four
// kinds of core, and cpuinfo is the machine's word.
const maxArmClusters = 4

// armModel names arm64 cores. One kind is named alone ("Cortex-A72");
// several are named big first, each with its count ("Cortex-A76 ×4 +
// Cortex-A55 ×4"). A part not in armParts is shown by its numbers.
func armModel(cores []armCore) string {
	type cluster struct {
		name  string
		rank  int
		count int
		last  int // index of the cluster's last core
	}
	var clusters []*cluster
	byName := map[string]*cluster{}
	for i, c := range cores {
		p, ok := armParts[strings.ToLower(c.implementer)+"/"+strings.ToLower(c.part)]
		if !ok {
			p = armPart{name: fmt.Sprintf("Arm implementer %s part %s", truncate(c.implementer, 16), truncate(c.part, 16))}
		}
		cl := byName[p.name]
		if cl == nil {
			if len(clusters) == maxArmClusters {
				continue
			}
			cl = &cluster{name: p.name, rank: p.rank}
			byName[p.name] = cl
			clusters = append(clusters, cl)
		}
		cl.count++
		cl.last = i
	}
	switch len(clusters) {
	case 0:
		return ""
	case 1:
		return clusters[0].name
	}
	// Big first; among unknown or equal ranks, the cores listed last,
	// which on big.LITTLE chips are the big ones.
	slices.SortStableFunc(clusters, func(a, b *cluster) int {
		if c := cmp.Compare(b.rank, a.rank); c != 0 {
			return c
		}
		return cmp.Compare(b.last, a.last)
	})
	parts := make([]string, len(clusters))
	for i, cl := range clusters {
		parts[i] = fmt.Sprintf("%s ×%d", cl.name, cl.count)
	}
	return strings.Join(parts, " + ")
}
