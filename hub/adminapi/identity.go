package adminapi

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Certificate is a client certificate the hub issued to a machine.
type Certificate struct {
	Serial  string     `json:"serial"`
	Issued  time.Time  `json:"issued"`
	Expires time.Time  `json:"expires"`
	Revoked *time.Time `json:"revoked,omitempty"`
}

// ReplaceMachine revokes a machine's certificates and lets its next
// enrolment through.
func (c *Client) ReplaceMachine(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/v1/machines/"+url.PathEscape(id)+"/replace", nil, nil)
}

// RevokeCertificate revokes one certificate by serial; with machineID set,
// it must be that machine's.
func (c *Client) RevokeCertificate(ctx context.Context, machineID, serial string) error {
	if machineID == "" {
		return c.do(ctx, http.MethodPost, "/v1/certificates/"+url.PathEscape(serial)+"/revoke", nil, nil)
	}
	return c.do(ctx, http.MethodPost, "/v1/machines/"+url.PathEscape(machineID)+"/revoke?serial="+url.QueryEscape(serial), nil, nil)
}

// Counters are what the hub refused or bounded of untrusted input since it
// started (GET /v1/counters).
type Counters struct {
	DroppedStatuses      int64 `json:"dropped_statuses"`
	StaleStatuses        int64 `json:"stale_statuses"`
	TimelineLinesDropped int64 `json:"timeline_lines_dropped"`
	TimelineLinesRetired int64 `json:"timeline_lines_retired"`
	// LongPolls is how many agents' polls the hub holds now (the gauge
	// einsora_hub_long_polls, without a scrape's cost).
	LongPolls int `json:"long_polls"`
}

// Counters reads the hub's counters.
func (c *Client) Counters(ctx context.Context) (out Counters, err error) {
	return out, c.do(ctx, http.MethodGet, "/v1/counters", nil, &out)
}
