package adminapi

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// CreateToken is the body of POST /v1/tokens.
type CreateToken struct {
	Owner  string `json:"owner"`
	Region string `json:"region"`
	// TTLSeconds is how long the token is valid; 0 means an hour.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// Token is a new enrolment token. The hub keeps only its hash: this is the
// one time it is shown.
type Token struct {
	Token   string    `json:"token"`
	Owner   string    `json:"owner"`
	Region  string    `json:"region"`
	Expires time.Time `json:"expires"`
	// Warning is set when no hub leads Region now: a machine enrolled
	// with the token would get no work.
	Warning string `json:"warning,omitempty"`
}

// CreateToken asks for a single-use enrolment token fixing owner and region.
func (c *Client) CreateToken(ctx context.Context, owner, region string, ttl time.Duration) (t Token, err error) {
	in := CreateToken{Owner: owner, Region: region, TTLSeconds: int64(ttl / time.Second)}
	return t, c.do(ctx, http.MethodPost, "/v1/tokens", in, &t)
}

// RevokeMachine revokes a machine's certificates and cuts it off.
func (c *Client) RevokeMachine(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/v1/machines/"+url.PathEscape(id)+"/revoke", nil, nil)
}

// RemoveMachine forgets a machine that holds no workloads.
func (c *Client) RemoveMachine(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/machines/"+url.PathEscape(id), nil, nil)
}
