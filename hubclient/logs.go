package hubclient

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
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
	return uploadLogs(ctx, p.client, base, token, body)
}

// UploadLogsTo is UploadLogs to the hub replica at rawURL
// (protocol.LogRequest.URL), which may be another than the one this
// transport syncs with: the same client certificate, the same pinned CA,
// and the replica's certificate must be valid for rawURL's host. "" or
// the transport's own hub is UploadLogs. It refuses, sending nothing, a
// URL that protocol.CheckHubURL refuses.
func (t *HTTPS) UploadLogsTo(ctx context.Context, rawURL, token string, body io.Reader) error {
	if rawURL == "" {
		return t.UploadLogs(ctx, token, body)
	}
	if err := protocol.CheckHubURL(rawURL); err != nil {
		return fmt.Errorf("log upload: %w", err)
	}
	u, err := ParseHubURL(rawURL)
	if err != nil {
		return fmt.Errorf("log upload: %w", err)
	}
	if u.String() == t.URL() {
		return t.UploadLogs(ctx, token, body)
	}
	// A pool of its own, verified against that replica's name; uploads
	// are rare and long, so it is not kept after.
	tc := PinnedTLSConfig(t.fp, u.Hostname())
	tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return t.cert.Load(), nil }
	tr := newHTTPTransport(tc)
	if t.dial != nil {
		tr.DialContext = t.dial
	}
	defer tr.CloseIdleConnections()
	return uploadLogs(ctx, &http.Client{Transport: tr}, u.String(), token, body)
}

func uploadLogs(ctx context.Context, client *http.Client, base, token string, body io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+protocol.LogsPath, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set(protocol.LogTokenHeader, token)
	resp, err := client.Do(req)
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
