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
