package hubclient

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"einsora.dev/edge/protocol"
)

// UploadLogs posts body, LogLine JSON one per line, to the hub's logs
// endpoint under token, over the transport's mutual TLS, its own request
// beside the syncs. It returns when the hub stops reading (it closes the
// upload when nobody listens) or ctx ends; the body is read as it is
// written, never gathered first.
func (t *HTTPS) UploadLogs(ctx context.Context, token string, body io.Reader) error {
	t.mu.Lock()
	p, base := t.cur, t.base
	p.inflight++
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		p.inflight--
		if p.retired && p.inflight == 0 {
			p.tr.CloseIdleConnections()
		}
		t.mu.Unlock()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+protocol.LogsPath, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set(protocol.LogTokenHeader, token)
	resp, err := p.client.Do(req)
	if err != nil {
		return explainTLS(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	he := &HubError{Code: resp.StatusCode}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		he.Message = e.Error
	} else {
		he.Message = strings.Join(strings.Fields(string(b[:min(len(b), 200)])), " ")
	}
	return he
}
