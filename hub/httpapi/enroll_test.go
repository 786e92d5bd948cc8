package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

func TestIdentifyClientCert(t *testing.T) {
	h, _ := newEnrolHub(t)
	resp, err := h.enrol(h.token("acme", "r1", time.Hour), "m-1", pkix.Name{})
	if err != nil {
		t.Fatal(err)
	}
	leaf := parseLeaf(t, resp.Certificate)
	r := httptest.NewRequest(http.MethodPost, protocol.SyncPath, nil)
	if _, err := h.api.IdentifyClientCert(r); err == nil || !strings.Contains(err.Error(), "einsora-agent enroll") {
		t.Errorf("no TLS: got %v", err)
	}
	r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
	if id, err := h.api.IdentifyClientCert(r); err != nil || id != "m-1" {
		t.Errorf("got %q, %v", id, err)
	}
	h.clk.Advance(ca.DefaultClientLifetime + time.Second)
	if _, err := h.api.IdentifyClientCert(r); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired while connected: got %v", err)
	}
}

func TestAdminTokensAndRevoke(t *testing.T) {
	h, authority := newEnrolHub(t)
	srv := httptest.NewServer(h.api.AdminHandler("secret"))
	t.Cleanup(srv.Close)
	c := &adminapi.Client{BaseURL: srv.URL, Token: "secret"}
	ctx := context.Background()
	got, err := c.CreateToken(ctx, "acme", "r1", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := protocol.ParseToken(got.Token)
	if err != nil || tok.Fingerprint != authority.Fingerprint() || got.Owner != "acme" || !got.Expires.Equal(epoch.Add(2*time.Hour)) {
		t.Fatalf("token %+v (%v)", got, err)
	}
	// The store holds the hash, not the secret.
	h.st.View(ctx, func(tx store.Tx) error {
		if _, err := tx.UseToken(tok.String(), epoch); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("token found by its plain text: %v", err)
		}
		return errors.New("roll back")
	})
	if _, err := c.CreateToken(ctx, "nobody", "r1", time.Hour); err == nil || !strings.Contains(err.Error(), "tenant create") {
		t.Errorf("token for an unknown owner: %v", err)
	}
	if _, err := h.enrol(tok, "m-1", pkix.Name{}); err != nil {
		t.Fatal(err)
	}
	if err := c.RevokeMachine(ctx, "m-1"); err != nil {
		t.Fatal(err)
	}
	if m, _ := c.Machine(ctx, "m-1"); m.CertExpires == nil {
		t.Error("machine show lacks cert_expires")
	}
	if err := c.RevokeMachine(ctx, "m-none"); !adminapi.NotFound(err) {
		t.Errorf("revoke unknown: %v", err)
	}
}

func TestEnrollHandlerAnswers(t *testing.T) {
	h, _ := newEnrolHub(t)
	srv := httptest.NewServer(h.api.EnrollHandler())
	t.Cleanup(srv.Close)
	tok := h.token("acme", "r1", time.Hour)
	tests := []struct {
		name string
		body []byte
		want int
	}{
		{"valid", enrolBody(t, tok, "m-1", pkix.Name{}), http.StatusOK},
		{"reused", enrolBody(t, tok, "m-2", pkix.Name{}), http.StatusUnauthorized},
		{"malformed", []byte(`{"token":"est1.x"}`), http.StatusBadRequest},
		{"oversized", []byte(`{"name":"` + strings.Repeat("x", protocol.MaxEnrollBody) + `"}`), http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.want {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("got %d %s, want %d", resp.StatusCode, b, tt.want)
			}
			if tt.want != http.StatusOK {
				var e adminapi.Error
				if json.NewDecoder(resp.Body).Decode(&e); e.Error == "" || strings.Contains(e.Error, "\n") {
					t.Errorf("want a one-line message, got %q", e.Error)
				}
			}
		})
	}
}
