package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client calls a hub's admin API.
type Client struct {
	// BaseURL is e.g. http://127.0.0.1:7480.
	BaseURL string
	Token   string
	HTTP    *http.Client
}

// StatusError is an error answer from the hub.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return e.Message }

// NotFound reports whether err is the hub saying that what was asked for
// does not exist.
func NotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("reach hub at %s: %w (is it running? see --hub)", c.BaseURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read answer from hub: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e Error
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return &StatusError{Code: resp.StatusCode, Message: e.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode answer from hub: %w", err)
	}
	return nil
}

func (c *Client) CreateTenant(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodPost, "/v1/tenants", CreateTenant{Name: name}, nil)
}

func (c *Client) Tenants(ctx context.Context) (ts []Tenant, err error) {
	return ts, c.do(ctx, http.MethodGet, "/v1/tenants", nil, &ts)
}

func (c *Client) CreateClass(ctx context.Context, cl Class) error {
	return c.do(ctx, http.MethodPost, "/v1/classes", cl, nil)
}

func (c *Client) Classes(ctx context.Context) (cs []Class, err error) {
	return cs, c.do(ctx, http.MethodGet, "/v1/classes", nil, &cs)
}

func (c *Client) Machines(ctx context.Context) (ms []Machine, err error) {
	return ms, c.do(ctx, http.MethodGet, "/v1/machines", nil, &ms)
}

func (c *Client) Machine(ctx context.Context, id string) (m Machine, err error) {
	return m, c.do(ctx, http.MethodGet, "/v1/machines/"+url.PathEscape(id), nil, &m)
}

func (c *Client) CreateWorkload(ctx context.Context, cw CreateWorkload) (w Workload, err error) {
	return w, c.do(ctx, http.MethodPost, "/v1/workloads", cw, &w)
}

// CreateWorkloads creates up to MaxCreateBatch workloads in one call, all
// or none.
func (c *Client) CreateWorkloads(ctx context.Context, cws []CreateWorkload) (out CreatedWorkloads, err error) {
	return out, c.do(ctx, http.MethodPost, "/v1/workloads/batch", CreateWorkloads{Workloads: cws}, &out)
}

// MaxCreateBatch is the most workloads CreateWorkloads takes (the hub's
// bound), and MaxBatchBody the most bytes its request body may have:
// 1,000 workloads of 8 KiB each, or fewer larger ones.
const (
	MaxCreateBatch = 1000
	MaxBatchBody   = 8 << 20
)

func (c *Client) Workloads(ctx context.Context) (ws []Workload, err error) {
	return ws, c.do(ctx, http.MethodGet, "/v1/workloads", nil, &ws)
}

func (c *Client) Workload(ctx context.Context, id string) (w Workload, err error) {
	return w, c.do(ctx, http.MethodGet, "/v1/workloads/"+url.PathEscape(id), nil, &w)
}

// Act is run, park or rm.
func (c *Client) Act(ctx context.Context, id, verb string) error {
	if verb == "rm" {
		return c.do(ctx, http.MethodDelete, "/v1/workloads/"+url.PathEscape(id), nil, nil)
	}
	return c.do(ctx, http.MethodPost, "/v1/workloads/"+url.PathEscape(id)+"/"+verb, nil, nil)
}

func (c *Client) Timeline(ctx context.Context, id string) (es []TimelineEntry, err error) {
	return es, c.do(ctx, http.MethodGet, "/v1/workloads/"+url.PathEscape(id)+"/timeline", nil, &es)
}
