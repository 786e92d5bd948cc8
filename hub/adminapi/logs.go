package adminapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"einsora.dev/edge/protocol"
)

// LogOptions are the query of GET /v1/workloads/{id}/logs.
type LogOptions struct {
	Tail   int
	Since  time.Time
	Follow bool
}

// Logs streams workload id's output to fn, a line at a time, until the
// hub ends the stream (with Follow: the workload is removed) or ctx ends.
func (c *Client) Logs(ctx context.Context, id string, o LogOptions, fn func(protocol.LogLine) error) error {
	q := url.Values{}
	if o.Tail > 0 {
		q.Set("tail", strconv.Itoa(o.Tail))
	}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	if o.Follow {
		q.Set("follow", "1")
	}
	u := strings.TrimRight(c.BaseURL, "/") + "/v1/workloads/" + url.PathEscape(id) + "/logs"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("reach hub at %s: %w (is it running? see --hub)", c.BaseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e Error
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return &StatusError{Code: resp.StatusCode, Message: e.Error}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), protocol.MaxLogLineBytes)
	for sc.Scan() {
		var l struct {
			protocol.LogLine
			Error string `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("decode a line from the hub: %w", err)
		}
		if l.Error != "" {
			return errors.New(l.Error)
		}
		if err := fn(l.LogLine); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("read the logs from the hub: %w", err)
	}
	return nil
}
