package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/inventory"
	"einsora.dev/edge/protocol"
)

// probeOrCapture probes, and with dir set also writes the capture there.
func probeOrCapture(ctx context.Context, p *inventory.Prober, dir string) (protocol.Inventory, error) {
	if dir == "" {
		return p.Probe(ctx), nil
	}
	return p.Capture(ctx, dir)
}

// writeBundle writes doctor's bundle: its checks (doctor.json) and an
// inventory capture (inventory/), for a user to attach to a bug report.
func writeBundle(ctx context.Context, dir string, p *inventory.Prober, checks []agent.Check) error {
	if _, err := p.Capture(ctx, filepath.Join(dir, "inventory")); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	b, err := json.MarshalIndent(checks, "", "  ")
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "doctor.json"), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return nil
}
