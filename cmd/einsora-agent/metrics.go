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

func (o *observer) config(c agent.Config) agent.Config {
	if o.m == nil {
		return c
	}
	c.Drivers, c.Inventory, c.OnApplyPass = o.m.Host(c.Drivers), o.m.Probe(c.Inventory), o.m.ApplyPass
	return c
}

func (o *observer) transport(t hubclient.Transport) hubclient.Transport {
	if o.m == nil {
		return t
	}
	return o.m.Transport(t)
}

func (o *observer) serve(ctx context.Context, log *slog.Logger) {
	if o.m != nil {
		go o.m.Serve(ctx, o.ln, log)
	}
}
