package hubclient

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"einsora.dev/edge/protocol"
)

// An upload to another replica's URL (LogRequest.URL) goes there, with
// the machine's certificate, and only to a replica that proves the pinned
// CA and the URL's name; a URL that is not https://HOST:PORT or is too
// long sends nothing.
func TestUploadLogsToAnotherReplica(t *testing.T) {
	hubCA, otherCA := newTestCA(t), newTestCA(t)
	var mu sync.Mutex
	var got []string
	record := func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		client := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			client = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		mu.Lock()
		got = append(got, r.Host+" "+client+" "+r.URL.Path+" "+r.Header.Get(protocol.LogTokenHeader)+" "+string(b))
		mu.Unlock()
		w.Write([]byte("{}"))
	}
	own, ownRequests := countingServer(t, hubCA.issue(t, "hub-b", x509.ExtKeyUsageServerAuth, "127.0.0.1"), record)
	other, otherRequests := countingServer(t, hubCA.issue(t, "hub-a", x509.ExtKeyUsageServerAuth, "localhost"), record)
	stranger, strangerRequests := countingServer(t, otherCA.issue(t, "hub-x", x509.ExtKeyUsageServerAuth, "localhost"), record)
	misnamed, misnamedRequests := countingServer(t, hubCA.issue(t, "hub-y", x509.ExtKeyUsageServerAuth, "hub.example.com"), record)
	byName := func(s string) string {
		u, _ := url.Parse(s)
		return "https://localhost:" + u.Port()
	}
	tr := newTransport(t, hubCA, own.URL, nil)
	ctx := context.Background()

	if err := tr.UploadLogsTo(ctx, byName(other.URL), "tok-1", strings.NewReader("line\n")); err != nil {
		t.Fatal(err)
	}
	if ownRequests.Load() != 0 || otherRequests.Load() != 1 || !strings.HasSuffix(got[0], " m-1 "+protocol.LogsPath+" tok-1 line\n") {
		t.Fatalf("own hub %d, other replica %d requests: %q", ownRequests.Load(), otherRequests.Load(), got)
	}
	if err := tr.UploadLogsTo(ctx, "", "tok-2", strings.NewReader("x\n")); err != nil || ownRequests.Load() != 1 {
		t.Fatalf("no URL: %v, own hub %d requests", err, ownRequests.Load())
	}
	for _, srv := range []string{stranger.URL, misnamed.URL} {
		var pe *PinError
		if err := tr.UploadLogsTo(ctx, byName(srv), "tok-3", strings.NewReader("x\n")); !errors.As(err, &pe) {
			t.Errorf("%s: %v, want a PinError", srv, err)
		}
	}
	if n := strangerRequests.Load() + misnamedRequests.Load(); n != 0 {
		t.Errorf("%d requests reached replicas that did not prove the CA and the name", n)
	}
	for _, bad := range []string{"http://" + strings.TrimPrefix(byName(other.URL), "https://"), byName(other.URL) + "/x",
		"https://" + strings.Repeat("a", protocol.MaxHubURLLen) + ".test"} {
		if err := tr.UploadLogsTo(ctx, bad, "tok-4", strings.NewReader("x\n")); err == nil {
			t.Errorf("%.60s accepted", bad)
		}
	}
	if otherRequests.Load() != 1 || ownRequests.Load() != 1 {
		t.Errorf("a refused URL sent something: %d, %d", otherRequests.Load(), ownRequests.Load())
	}
}
