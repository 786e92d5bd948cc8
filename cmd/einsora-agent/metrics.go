package main

import (
	"context"
	"log/slog"
	"net"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/agent/metrics"
	"einsora.dev/edge/hubclient"
)

// observer wires --metrics into the agent; without the flag it changes
// nothing.
type observer struct {
	m  *metrics.Agent
	ln net.Listener
}

func newObserver(addr string) (*observer, error) {
	if addr == "" {
		return &observer{}, nil
	}
	ln, err := metrics.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &observer{m: metrics.New(version), ln: ln}, nil
}

func (o *observer) Config(c agent.Config) agent.Config {
	if o.m == nil {
		return c
	}
	c.Drivers, c.Inventory, c.OnApplyPass = o.m.Host(c.Drivers), o.m.Probe(c.Inventory), o.m.ApplyPass
	return c
}

func (o *observer) Transport(t hubclient.Transport) hubclient.Transport {
	if o.m == nil {
		return t
	}
	return o.m.Transport(t)
}

// Serve serves the metrics until ctx is done.
func (o *observer) Serve(ctx context.Context, log *slog.Logger) {
	if o.m != nil {
		o.m.Serve(ctx, o.ln, log)
	}
}
