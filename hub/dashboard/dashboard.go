// Package dashboard is the hub's web dashboard: server-rendered pages of
// machines, workloads and enrolment tokens on the admin listener, signed in
// with the admin token or a one-time link, updated live by polling a page
// fragment. It reads the hub only through the Hub interface.
package dashboard

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Prefix is where the dashboard is mounted on the admin listener.
const Prefix = "/ui/"

// LinkPath is where `einsora-hub dashboard` asks, with the admin token,
// for a one-time sign-in link.
const LinkPath = Prefix + "link"

const (
	cookieName = "einsora_session"
	// DefaultPageSize is how many rows a list page shows.
	DefaultPageSize = 50
	maxForm         = 16 << 10
)

// Hub is what the dashboard reads and does.
type Hub interface {
	// MachinesAfter is one page of machines in ID order, after the ID
	// after: the machines list never reads the whole fleet.
	MachinesAfter(ctx context.Context, after string, limit int) ([]hub.MachineView, error)
	Machine(ctx context.Context, id string) (hub.MachineView, error)
	Workloads(ctx context.Context) ([]store.Workload, error)
	MachineWorkloads(ctx context.Context, machineID string) ([]store.Workload, error)
	Workload(ctx context.Context, id string) (store.Workload, error)
	Timeline(ctx context.Context, id string) ([]store.TimelineEntry, error)
	CreateEnrollToken(ctx context.Context, owner, region string, ttl time.Duration) (protocol.Token, time.Time, error)
	EnrollTokens(ctx context.Context, limit int) ([]store.Token, error)
	RevokeMachine(ctx context.Context, id string) error
	// UnledWarning is one line when no hub leads region now, else "".
	UnledWarning(ctx context.Context, region string) string
}

// Config configures a Dashboard.
type Config struct {
	Hub        Hub
	AdminToken string
	// AgentURL is the agents' API, shown in the enrol command; "" when the
	// hub has none (solo).
	AgentURL string
	// Version is the hub's; agents older than it are flagged.
	Version  string
	Clock    clock.Clock
	Logger   *slog.Logger
	PageSize int
}

// Dashboard serves the pages. It is an http.Handler for paths under Prefix.
type Dashboard struct {
	cfg   Config
	clk   clock.Clock
	log   *slog.Logger
	table *table
	pages map[string]*template.Template
	mux   *http.ServeMux
}

//go:embed assets
var assets embed.FS

// New returns a dashboard of cfg.Hub.
func New(cfg Config) *Dashboard {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	d := &Dashboard{cfg: cfg, clk: cfg.Clock, log: cfg.Logger.With("component", "dashboard"), table: newTable(), pages: parsePages()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"login", d.loginForm)
	mux.HandleFunc("POST "+Prefix+"login", d.login)
	mux.HandleFunc("GET "+Prefix+"login/link", d.loginLink)
	mux.HandleFunc("POST "+LinkPath, d.makeLink)
	mux.Handle("GET "+Prefix+"assets/", http.StripPrefix(Prefix, http.FileServerFS(assets)))
	mux.HandleFunc("POST "+Prefix+"logout", d.signedIn(d.logout))
	mux.HandleFunc("GET "+Prefix+"{$}", d.signedIn(d.machines))
	mux.HandleFunc("GET "+Prefix+"machines/{id}", d.signedIn(d.machine))
	mux.HandleFunc("GET "+Prefix+"machines/{id}/revoke", d.signedIn(d.revokeForm))
	mux.HandleFunc("POST "+Prefix+"machines/{id}/revoke", d.signedIn(d.revoke))
	mux.HandleFunc("GET "+Prefix+"workloads", d.signedIn(d.workloads))
	mux.HandleFunc("GET "+Prefix+"workloads/{id}", d.signedIn(d.workload))
	mux.HandleFunc("GET "+Prefix+"tokens", d.signedIn(d.tokens))
	mux.HandleFunc("POST "+Prefix+"tokens", d.signedIn(d.createToken))
	d.mux = mux
	return d
}

func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Only the dashboard's own script and style run; no page may frame it.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	}
	d.mux.ServeHTTP(w, r)
}

// view is what every page template gets.
type view struct {
	Title  string
	CSRF   string
	Nav    string
	Error  string
	Notice string
	Data   any
}

type pageHandler func(w http.ResponseWriter, r *http.Request, s session)

// signedIn admits requests with a live session, and POSTs only with its
// CSRF token; others go to the sign-in page.
func (d *Dashboard) signedIn(next pageHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(cookieName)
		var s session
		ok := err == nil
		if ok {
			s, ok = d.table.session(c.Value, d.clk.Now())
		}
		if !ok {
			if r.Method == http.MethodGet && r.URL.Query().Get("frag") == "" {
				http.Redirect(w, r, Prefix+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in again: the session ended", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost && subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
			http.Error(w, "the form is stale or came from elsewhere (CSRF check failed); reload the page and try again", http.StatusForbidden)
			return
		}
		next(w, r, s)
	}
}

func (d *Dashboard) setSession(w http.ResponseWriter, r *http.Request) {
	id, _ := d.table.newSession(d.clk.Now())
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: id, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: int(sessionTTL / time.Second),
	})
}

func (d *Dashboard) loginForm(w http.ResponseWriter, r *http.Request) {
	d.render(w, r, http.StatusOK, "login", view{Title: "Sign in", Data: safeNext(r.URL.Query().Get("next"))})
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	if d.cfg.AdminToken == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(d.cfg.AdminToken)) != 1 {
		d.render(w, r, http.StatusUnauthorized, "login", view{Title: "Sign in", Error: "That is not the admin token. It is in the hub's data directory (admin-token); or run einsora-hub dashboard for a sign-in link.", Data: next})
		return
	}
	d.setSession(w, r)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (d *Dashboard) loginLink(w http.ResponseWriter, r *http.Request) {
	if !d.table.useLink(r.URL.Query().Get("code"), d.clk.Now()) {
		d.render(w, r, http.StatusUnauthorized, "login", view{Title: "Sign in", Error: "That sign-in link was used before or has expired; run einsora-hub dashboard again.", Data: Prefix})
		return
	}
	d.setSession(w, r)
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// LinkResponse is the answer to POST LinkPath.
type LinkResponse struct {
	// Path is the sign-in link's path and query, to put after the admin
	// URL.
	Path    string    `json:"path"`
	Expires time.Time `json:"expires"`
}

func (d *Dashboard) makeLink(w http.ResponseWriter, r *http.Request) {
	if d.cfg.AdminToken == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+d.cfg.AdminToken)) != 1 {
		http.Error(w, "missing or wrong admin token", http.StatusUnauthorized)
		return
	}
	now := d.clk.Now()
	code := d.table.newLink(now)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(LinkResponse{Path: Prefix + "login/link?code=" + code, Expires: now.Add(linkTTL)})
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request, _ session) {
	if c, err := r.Cookie(cookieName); err == nil {
		d.table.endSession(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// safeNext keeps a redirect inside the dashboard.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix
	}
	return next
}

// render writes a page, or only its live part when the page polls it.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, code int, page string, v view) {
	t := d.pages[page]
	name := "layout"
	if r.URL.Query().Get("frag") != "" && t.Lookup("live") != nil {
		name = "live"
	}
	var sb strings.Builder
	if err := t.ExecuteTemplate(&sb, name, v); err != nil {
		d.log.Error("render", "page", page, "err", err)
		http.Error(w, "the dashboard failed to render this page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write([]byte(sb.String()))
}

func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, s session, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, store.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, hub.ErrInvalid):
		code = http.StatusBadRequest
	default:
		d.log.Error("dashboard request failed", "path", r.URL.Path, "err", err)
	}
	d.render(w, r, code, "error", view{Title: "Error", CSRF: s.csrf, Error: err.Error()})
}
