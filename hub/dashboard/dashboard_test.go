package dashboard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// fakeHub holds machines and workloads in memory for the page tests; the
// end-to-end test in e2e/ runs the dashboard over a real hub.
type fakeHub struct {
	mu       sync.Mutex
	machines []hub.MachineView
	wls      []store.Workload
	revoked  []string
	tokens   []store.Token
}

func (f *fakeHub) MachinesAfter(_ context.Context, after string, limit int) ([]hub.MachineView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ms := slices.Clone(f.machines)
	slices.SortFunc(ms, func(a, b hub.MachineView) int { return strings.Compare(a.ID, b.ID) })
	ms = slices.DeleteFunc(ms, func(m hub.MachineView) bool { return m.ID <= after })
	return ms[:min(limit, len(ms))], nil
}

func (f *fakeHub) Machine(_ context.Context, id string) (hub.MachineView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.machines {
		if m.ID == id {
			return m, nil
		}
	}
	return hub.MachineView{}, fmt.Errorf("machine %s: %w", id, store.ErrNotFound)
}

func (f *fakeHub) Workloads(context.Context) ([]store.Workload, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]store.Workload(nil), f.wls...), nil
}

func (f *fakeHub) MachineWorkloads(_ context.Context, id string) ([]store.Workload, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.Workload
	for _, w := range f.wls {
		if w.Machine == id {
			out = append(out, w)
		}
	}
	return out, nil
}

func (f *fakeHub) Workload(_ context.Context, id string) (store.Workload, error) {
	for _, w := range f.wls {
		if w.ID == id {
			return w, nil
		}
	}
	return store.Workload{}, fmt.Errorf("workload %s: %w", id, store.ErrNotFound)
}

func (f *fakeHub) Timeline(_ context.Context, id string) ([]store.TimelineEntry, error) {
	return []store.TimelineEntry{{Workload: id, Text: "created"}}, nil
}

func (f *fakeHub) EnrollTokens(_ context.Context, limit int) ([]store.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens[:min(limit, len(f.tokens))], nil
}

func (f *fakeHub) CreateEnrollToken(_ context.Context, owner, region string, ttl time.Duration) (protocol.Token, time.Time, error) {
	if owner == "" {
		return protocol.Token{}, time.Time{}, fmt.Errorf("%w: owner is empty", hub.ErrInvalid)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens = append([]store.Token{{Owner: owner, Region: region, Created: time.Now(), Expires: time.Now().Add(ttl)}}, f.tokens...)
	return protocol.Token{Secret: [32]byte{1}}, time.Unix(0, 0).Add(ttl), nil
}

// UnledWarning: the fake's hubs lead every region but "us".
func (f *fakeHub) UnledWarning(_ context.Context, region string) string {
	if region == "us" {
		return "no hub leads region us now"
	}
	return ""
}

func (f *fakeHub) RevokeMachine(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.machines {
		if f.machines[i].ID == id {
			f.machines[i].Revoked = true
			f.revoked = append(f.revoked, id)
			return nil
		}
	}
	return fmt.Errorf("machine %s: %w", id, store.ErrNotFound)
}

const adminToken = "admin-secret"

func newTest(t *testing.T, f *fakeHub) (*httptest.Server, *http.Client) {
	t.Helper()
	d := New(Config{Hub: f, AdminToken: adminToken, AgentURL: "https://hub.example:8443", Version: "v1.2.0", Clock: clock.Real{}})
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return srv, &http.Client{Jar: jar}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values) (int, string) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func signIn(t *testing.T, srv *httptest.Server, c *http.Client) string {
	t.Helper()
	code, body := post(t, c, srv.URL+Prefix+"login", url.Values{"token": {adminToken}, "next": {Prefix}})
	if code != http.StatusOK {
		t.Fatalf("sign in: %d %s", code, body)
	}
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in %s", body)
	}
	return m[1]
}

func TestSignInRefusesAWrongTokenAndSetsAStrictCookie(t *testing.T) {
	srv, c := newTest(t, &fakeHub{})
	if code, _ := get(t, c, srv.URL+Prefix); code != http.StatusOK {
		t.Fatalf("signed-out GET: %d, want the sign-in page", code)
	}
	if code, body := post(t, c, srv.URL+Prefix+"login", url.Values{"token": {"wrong"}}); code != http.StatusUnauthorized || !strings.Contains(body, "not the admin token") {
		t.Fatalf("wrong token: %d", code)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	sc, err := noFollow.PostForm(srv.URL+Prefix+"login", url.Values{"token": {adminToken}, "next": {"https://evil.example/"}})
	if err != nil {
		t.Fatal(err)
	}
	sc.Body.Close()
	if sc.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d, want a redirect", sc.StatusCode)
	}
	if loc := sc.Header.Get("Location"); loc != Prefix {
		t.Errorf("redirect to %q; want %q (never off the dashboard)", loc, Prefix)
	}
	cookie := sc.Header.Get("Set-Cookie")
	for _, want := range []string{cookieName + "=", "HttpOnly", "SameSite=Strict", "Path=" + Prefix} {
		if !strings.Contains(cookie, want) {
			t.Errorf("cookie %q lacks %s", cookie, want)
		}
	}
}

func TestPostsNeedTheCSRFToken(t *testing.T) {
	f := &fakeHub{machines: []hub.MachineView{{Machine: store.Machine{ID: "m1", Owner: "acme", Region: "eu"}}},
		wls: []store.Workload{{ID: "w-here", Machine: "m1"}, {ID: "w-elsewhere", Machine: "m2"}}}
	srv, c := newTest(t, f)
	csrf := signIn(t, srv, c)
	if _, body := get(t, c, srv.URL+Prefix+"machines/m1"); !strings.Contains(body, `data-workload="w-here"`) || strings.Contains(body, "w-elsewhere") {
		t.Error("the machine page does not list exactly its workloads")
	}
	if code, _ := post(t, c, srv.URL+Prefix+"machines/m1/revoke", url.Values{"confirm": {"m1"}}); code != http.StatusForbidden {
		t.Errorf("revoke without CSRF: %d, want 403", code)
	}
	if code, _ := post(t, c, srv.URL+Prefix+"machines/m1/revoke", url.Values{"confirm": {"m1"}, "csrf": {"x" + csrf}}); code != http.StatusForbidden {
		t.Errorf("revoke with a wrong CSRF token: %d, want 403", code)
	}
	if code, _ := post(t, c, srv.URL+Prefix+"machines/m1/revoke", url.Values{"csrf": {csrf}}); code != http.StatusBadRequest {
		t.Errorf("revoke unconfirmed: %d, want 400", code)
	}
	if len(f.revoked) != 0 {
		t.Fatalf("revoked %v without a confirmed, CSRF-checked POST", f.revoked)
	}
	code, body := post(t, c, srv.URL+Prefix+"machines/m1/revoke", url.Values{"confirm": {"m1"}, "csrf": {csrf}})
	if code != http.StatusOK || len(f.revoked) != 1 || !strings.Contains(body, `badge revoked`) {
		t.Errorf("confirmed revoke: %d, revoked %v", code, f.revoked)
	}
}

func TestMachinesArePagedAndAgentStringsEscaped(t *testing.T) {
	f := &fakeHub{}
	for i := range 120 {
		f.machines = append(f.machines, hub.MachineView{Machine: store.Machine{
			ID: fmt.Sprintf("m%03d", i), Name: fmt.Sprintf("<script>alert(%d)</script>", i), Owner: "acme", Region: "eu",
			AgentVersion: "v1.1.0", Generation: 5, AppliedGeneration: 3,
			Inventory: &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 1024, Drivers: []string{"sim"},
				GPUs: []protocol.GPU{{Vendor: "nvidia", Model: "<b>H200</b>", ID: "0"}}},
		}, Online: i%2 == 0})
	}
	srv, c := newTest(t, f)
	signIn(t, srv, c)
	_, first := get(t, c, srv.URL+Prefix+"?frag=1")
	if n := strings.Count(first, "<tr data-machine="); n != 50 || !strings.Contains(first, `href="?after=m049"`) || strings.Contains(first, "first page") {
		t.Errorf("the first page of 120 by 50 shows %d rows; want 50 and a link to the next page only", n)
	}
	_, body := get(t, c, srv.URL+Prefix+"?after=m099&frag=1")
	if n := strings.Count(body, "<tr data-machine="); n != 20 {
		t.Errorf("the page after m099 shows %d rows, want 20", n)
	}
	if !strings.Contains(body, `data-machine="m100"`) || strings.Contains(body, `data-machine="m099"`) || strings.Contains(body, "next →") {
		t.Error("the last page does not start at the 101st machine, or links to a next page")
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "<b>H200") {
		t.Error("an agent-supplied string reached the page unescaped")
	}
	if !strings.Contains(body, "&lt;script&gt;alert(100)") {
		t.Error("the machine's name is not shown as text")
	}
	for _, want := range []string{"2 behind", `title="older than the hub"`, "first page", "nvidia &lt;b&gt;H200", `class="badge online"`, `class="badge offline"`} {
		if !strings.Contains(body, want) {
			t.Errorf("machines page lacks %q", want)
		}
	}
	if strings.Contains(body, "<html") {
		t.Error("the fragment carries the whole page")
	}
}

func TestWorkloadsFilter(t *testing.T) {
	f := &fakeHub{wls: []store.Workload{
		{ID: "w1", Tenant: "acme", Region: "eu", State: store.StateRunning},
		{ID: "w2", Tenant: "acme", Region: "us", State: store.StatePending},
		{ID: "w3", Tenant: "beta", Region: "eu", State: store.StateRunning},
	}}
	srv, c := newTest(t, f)
	signIn(t, srv, c)
	_, body := get(t, c, srv.URL+Prefix+"workloads?tenant=acme&state=running&frag=1")
	if !strings.Contains(body, `data-workload="w1"`) || strings.Contains(body, `data-workload="w2"`) || strings.Contains(body, `data-workload="w3"`) {
		t.Errorf("filter tenant=acme state=running: %s", body)
	}
	// w2 waits in us, which no hub leads: the page says so, once.
	if n := strings.Count(body, "no hub leads region us now"); n != 1 {
		t.Errorf("the workloads page warns %d times of region us, want 1", n)
	}
}

func TestTokenPageShowsTheEnrolCommand(t *testing.T) {
	now := time.Now()
	srv, c := newTest(t, &fakeHub{tokens: []store.Token{
		{Owner: "old", Region: "eu", Created: now.Add(-2 * time.Hour), Expires: now.Add(-time.Hour)},
		{Owner: "done", Region: "eu", Created: now.Add(-2 * time.Hour), Expires: now.Add(time.Hour), Used: now.Add(-time.Hour)},
	}})
	csrf := signIn(t, srv, c)
	code, body := post(t, c, srv.URL+Prefix+"tokens", url.Values{"csrf": {csrf}, "owner": {"acme"}, "region": {"eu"}, "ttl": {"1h"}})
	want := "einsora-agent enroll --hub https://hub.example:8443 --token " + protocol.Token{Secret: [32]byte{1}}.String()
	if code != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("create token: %d; want the command %q in the page", code, want)
	}
	if strings.Contains(body, "no hub leads") {
		t.Error("a token for a led region warns")
	}
	if _, body := post(t, c, srv.URL+Prefix+"tokens", url.Values{"csrf": {csrf}, "owner": {"acme"}, "region": {"us"}, "ttl": {"1h"}}); !strings.Contains(body, "no hub leads region us now") {
		t.Error("a token for region us, which no hub leads, does not warn")
	}
	for _, want := range []string{`<span class="badge outstanding">outstanding</span>`, `<span class="badge used">used</span>`, `<span class="badge expired">expired</span>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the tokens list lacks %s", want)
		}
	}
	if code, body := post(t, c, srv.URL+Prefix+"tokens", url.Values{"csrf": {csrf}, "owner": {""}, "region": {"eu"}, "ttl": {"1h"}}); code != http.StatusBadRequest || !strings.Contains(body, "owner is empty") {
		t.Errorf("token without owner: %d", code)
	}
	if code, _ := post(t, c, srv.URL+Prefix+"tokens", url.Values{"csrf": {csrf}, "owner": {"acme"}, "region": {"eu"}, "ttl": {"soon"}}); code != http.StatusBadRequest {
		t.Errorf("token with TTL soon: %d", code)
	}
}

func TestSignInLinkWorksOnce(t *testing.T) {
	srv, c := newTest(t, &fakeHub{})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+LinkPath, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("link without the admin token: %v %v", resp.StatusCode, err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	path := regexp.MustCompile(`"path":"([^"]+)"`).FindStringSubmatch(string(b))
	if path == nil {
		t.Fatalf("link answer %s", b)
	}
	link := srv.URL + strings.ReplaceAll(path[1], `\u0026`, "&")
	if code, body := get(t, c, link); code != http.StatusOK || !strings.Contains(body, "Sign out") {
		t.Fatalf("first use of the link: %d", code)
	}
	_, c2 := newTest(t, &fakeHub{})
	if code, _ := get(t, c2, link); code != http.StatusUnauthorized {
		t.Errorf("second use of the link: %d, want 401", code)
	}
}

func TestTablesAreBounded(t *testing.T) {
	tb := newTable()
	now := time.Unix(1000, 0)
	first, _ := tb.newSession(now)
	for i := range 3 * maxSessions {
		tb.newSession(now.Add(time.Duration(i+1) * time.Second))
	}
	links := make([]string, 0)
	for range 3 * maxLinks {
		links = append(links, tb.newLink(now))
	}
	if s, l := tb.size(); s != maxSessions || l != maxLinks {
		t.Errorf("table holds %d sessions, %d links; want at most %d, %d", s, l, maxSessions, maxLinks)
	}
	if _, ok := tb.session(first, now); ok {
		t.Error("the oldest session was not the one evicted")
	}
	if !tb.useLink(links[len(links)-1], now) || tb.useLink(links[len(links)-1], now) {
		t.Error("the newest link does not sign in exactly once")
	}
	late := tb.newLink(now)
	if tb.useLink(late, now.Add(linkTTL)) {
		t.Error("an expired link signed in")
	}
	id, _ := tb.newSession(now)
	if _, ok := tb.session(id, now.Add(sessionTTL)); ok {
		t.Error("an expired session was accepted")
	}
}

func TestOlderVersion(t *testing.T) {
	for _, c := range []struct {
		agent, hub string
		want       bool
	}{{"v1.1.0", "v1.2.0", true}, {"v1.2.0", "v1.2.0", false}, {"v1.10.0", "v1.9.3", false}, {"dev", "v1.0.0", false}, {"v0.9.9-rc1", "v1.0.0", true}} {
		if got := olderVersion(c.agent, c.hub); got != c.want {
			t.Errorf("olderVersion(%q, %q) = %v", c.agent, c.hub, got)
		}
	}
}

// A workload on an offline machine shows its state as unknown since the
// machine went silent, in the list, on the machine's page and its own.
func TestWorkloadOnAnOfflineMachineIsUnknown(t *testing.T) {
	silent := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	f := &fakeHub{
		machines: []hub.MachineView{
			{Machine: store.Machine{ID: "m-off", Region: "eu"}, OfflineSince: silent},
			{Machine: store.Machine{ID: "m-on", Region: "eu"}, Online: true},
		},
		wls: []store.Workload{
			{ID: "w-off", Tenant: "acme", Region: "eu", State: store.StateRunning, Machine: "m-off"},
			{ID: "w-on", Tenant: "acme", Region: "eu", State: store.StateRunning, Machine: "m-on"},
		},
	}
	srv, c := newTest(t, f)
	signIn(t, srv, c)
	const unknown = "unknown: machine offline since"
	for _, page := range []string{"workloads?frag=1", "machines/m-off", "workloads/w-off"} {
		if _, body := get(t, c, srv.URL+Prefix+page); strings.Count(body, unknown) != 1 {
			t.Errorf("%s: %d unknown states, want 1", page, strings.Count(body, unknown))
		}
	}
	if _, body := get(t, c, srv.URL+Prefix+"workloads/w-on"); strings.Contains(body, unknown) {
		t.Error("a workload on an online machine reads unknown")
	}
}
