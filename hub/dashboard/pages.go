package dashboard

import (
	"cmp"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
)

//go:embed templates
var templates embed.FS

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"join": strings.Join,
}

func parsePages() map[string]*template.Template {
	pages := map[string]*template.Template{}
	for _, p := range []string{"login", "error", "machines", "machine", "revoke", "workloads", "workload", "tokens"} {
		pages[p] = template.Must(template.New(p).Funcs(funcs).ParseFS(templates, "templates/layout.html", "templates/"+p+".html"))
	}
	return pages
}

// certSoon is when a certificate's coming expiry is flagged.
const certSoon = 7 * 24 * time.Hour

type machineRow struct {
	ID, Name, Owner, Region string
	// State is online, offline or revoked.
	State        string
	LastSync     time.Time
	AgentVersion string
	VersionOld   bool
	Desired      int64
	Applied      int64
	Drift        int64
	CertExpires  time.Time
	CertSoon     bool
	Inventory    string
	GPUs         string
	Drivers      []string
}

func (d *Dashboard) row(m hub.MachineView) machineRow {
	r := machineRow{
		ID: m.ID, Name: m.Name, Owner: m.Owner, Region: m.Region, State: m.State(),
		LastSync: m.LastSync, AgentVersion: m.AgentVersion, VersionOld: olderVersion(m.AgentVersion, d.cfg.Version),
		Desired: m.Generation, Applied: m.AppliedGeneration, Drift: m.Generation - m.AppliedGeneration,
		CertExpires: m.CertExpires,
		CertSoon:    !m.Revoked && !m.CertExpires.IsZero() && m.CertExpires.Sub(d.clk.Now()) < certSoon,
	}
	if inv := m.Inventory; inv != nil {
		r.Inventory = fmt.Sprintf("%s/%s, %d CPUs, %d MiB", inv.OS, inv.Arch, inv.CPUs, inv.MemoryMB)
		var gpus []string
		for _, g := range inv.GPUs {
			gpus = append(gpus, strings.TrimSpace(g.Vendor+" "+g.Model))
		}
		r.GPUs = strings.Join(gpus, ", ")
		r.Drivers = inv.Drivers
	}
	return r
}

// olderVersion reports whether agent's vMAJOR.MINOR.PATCH is below hub's;
// versions that do not parse (dev builds) are never flagged.
func olderVersion(agent, hubv string) bool {
	a, okA := parseVersion(agent)
	h, okH := parseVersion(hubv)
	return okA && okH && slices.Compare(a, h) < 0
}

func parseVersion(s string) ([]int, bool) {
	s = strings.TrimPrefix(s, "v")
	s, _, _ = strings.Cut(s, "-")
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return nil, false
	}
	out := make([]int, 3)
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

// pager is one page of a list.
type pager struct {
	Page, Pages, Total int
	Prev, Next         string
}

// paginate cuts page p (from 1) of n rows of size and links the
// neighbours, keeping q.
func paginate(n, size int, q url.Values) (lo, hi int, pg pager) {
	pages := max(1, (n+size-1)/size)
	p, _ := strconv.Atoi(q.Get("page"))
	p = min(max(p, 1), pages)
	pg = pager{Page: p, Pages: pages, Total: n}
	link := func(to int) string {
		v := url.Values{}
		for k, vs := range q {
			if k != "page" && k != "frag" {
				v[k] = vs
			}
		}
		v.Set("page", strconv.Itoa(to))
		return "?" + v.Encode()
	}
	if p > 1 {
		pg.Prev = link(p - 1)
	}
	if p < pages {
		pg.Next = link(p + 1)
	}
	lo = min((p-1)*size, n)
	return lo, min(lo+size, n), pg
}

type machinesData struct {
	Rows []machineRow
	// First is set when this is not the first page; Next when there is a
	// page after it.
	First, Next string
	From        int
}

// machines lists one page of machines, read from the hub by keyset: a page
// costs the same at any fleet size.
func (d *Dashboard) machines(w http.ResponseWriter, r *http.Request, s session) {
	after := r.URL.Query().Get("after")
	size := d.cfg.PageSize
	// One more than a page tells whether there is a next one.
	ms, err := d.cfg.Hub.MachinesAfter(r.Context(), after, size+1)
	if err != nil {
		d.fail(w, r, s, err)
		return
	}
	data := machinesData{Rows: make([]machineRow, 0, min(len(ms), size))}
	if len(ms) > size {
		ms = ms[:size]
		data.Next = "?after=" + url.QueryEscape(ms[size-1].ID)
	}
	if after != "" {
		data.First = Prefix
	}
	for _, m := range ms {
		data.Rows = append(data.Rows, d.row(m))
	}
	d.render(w, r, http.StatusOK, "machines", view{Title: "Machines", Nav: "machines", CSRF: s.csrf, Data: data})
}

type machineData struct {
	M         machineRow
	V         hub.MachineView
	Workloads []workloadRow
	Events    []event
}

type event struct {
	At   time.Time
	Text string
}

// events are what the hub's record of a machine tells of its life; the hub
// keeps no machine event log yet.
func events(m hub.MachineView) []event {
	var es []event
	add := func(t time.Time, s string) {
		if !t.IsZero() {
			es = append(es, event{t, s})
		}
	}
	add(m.Registered, "enrolled")
	add(m.AgentStarted, "agent started (boot "+cmp.Or(m.BootID, "unknown")+")")
	add(m.LastSync, "last sync")
	if m.Revoked {
		// RevokedAt is zero for machines revoked before it was kept.
		es = append(es, event{m.RevokedAt, "revoked"})
	}
	add(m.CertExpires, "certificate expires")
	slices.SortStableFunc(es, func(a, b event) int { return a.At.Compare(b.At) })
	return es
}

func (d *Dashboard) machine(w http.ResponseWriter, r *http.Request, s session) {
	m, err := d.cfg.Hub.Machine(r.Context(), r.PathValue("id"))
	if err != nil {
		d.fail(w, r, s, err)
		return
	}
	ws, err := d.cfg.Hub.MachineWorkloads(r.Context(), m.ID)
	if err != nil {
		d.fail(w, r, s, err)
		return
	}
	d.render(w, r, http.StatusOK, "machine", view{Title: "Machine " + cmp.Or(m.Name, m.ID), Nav: "machines", CSRF: s.csrf,
		Data: machineData{M: d.row(m), V: m, Workloads: d.workloadRows(r.Context(), ws, m), Events: events(m)}})
}

func (d *Dashboard) revokeForm(w http.ResponseWriter, r *http.Request, s session) {
	m, err := d.cfg.Hub.Machine(r.Context(), r.PathValue("id"))
	if err != nil {
		d.fail(w, r, s, err)
		return
	}
	d.render(w, r, http.StatusOK, "revoke", view{Title: "Revoke " + cmp.Or(m.Name, m.ID), Nav: "machines", CSRF: s.csrf, Data: d.row(m)})
}

func (d *Dashboard) revoke(w http.ResponseWriter, r *http.Request, s session) {
	id := r.PathValue("id")
	if r.PostFormValue("confirm") != id {
		d.fail(w, r, s, fmt.Errorf("%w: type the machine's ID to confirm", hub.ErrInvalid))
		return
	}
	if err := d.cfg.Hub.RevokeMachine(r.Context(), id); err != nil {
		d.fail(w, r, s, err)
		return
	}
	d.log.Info("machine revoked from the dashboard", "machine", id)
	http.Redirect(w, r, Prefix+"machines/"+url.PathEscape(id), http.StatusSeeOther)
}

type workloadsData struct {
	Rows                  []workloadRow
	Pager                 pager
	Tenant, Region, State string
	Tenants, Regions      []string
	States                []store.State
	// Unled warns of the regions with waiting workloads that no hub
	// leads.
	Unled []string
}

func (d *Dashboard) workloads(w http.ResponseWriter, r *http.Request, s session) {
	ws, err := d.cfg.Hub.Workloads(r.Context())
	if err != nil {
		d.fail(w, r, s, err)
		return
	}
	q := r.URL.Query()
	data := workloadsData{Tenant: q.Get("tenant"), Region: q.Get("region"), State: q.Get("state"), States: store.States}
	tenants, regions := map[string]bool{}, map[string]bool{}
	waiting := map[string]bool{}
	for _, wl := range ws {
		tenants[wl.Tenant], regions[wl.Region] = true, true
		if wl.State == store.StatePending || wl.State == store.StateQueued {
			waiting[wl.Region] = true
		}
	}
	for _, region := range sortedKeys(waiting) {
		if len(data.Unled) == maxUnledShown {
			break
		}
		if w := d.cfg.Hub.UnledWarning(r.Context(), region); w != "" {
			data.Unled = append(data.Unled, w)
		}
	}
	data.Tenants, data.Regions = sortedKeys(tenants), sortedKeys(regions)
	ws = slices.DeleteFunc(ws, func(wl store.Workload) bool {
		return data.Tenant != "" && wl.Tenant != data.Tenant || data.Region != "" && wl.Region != data.Region ||
			data.State != "" && string(wl.State) != data.State
	})
	lo, hi, pg := paginate(len(ws), d.cfg.PageSize, q)
	data.Rows, data.Pager = d.workloadRows(r.Context(), ws[lo:hi]), pg
	d.render(w, r, http.StatusOK, "workloads", view{Title: "Workloads", Nav: "workloads", CSRF: s.csrf, Data: data})
}

// maxUnledShown bounds the regions the workloads page asks about.
const maxUnledShown = 10

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

type workloadData struct {
	W        workloadRow
	Timeline []store.TimelineEntry
}

func (d *Dashboard) workload(w http.ResponseWriter, r *http.Request, s session) {
	wl, err := d.cfg.Hub.Workload(r.Context(), r.PathValue("id"))
	if err != nil {
		d.fail(w, r, s, err)
		return
	}
	tl, err := d.cfg.Hub.Timeline(r.Context(), wl.ID)
	if err != nil {
		d.fail(w, r, s, err)
		return
	}
	d.render(w, r, http.StatusOK, "workload", view{Title: "Workload " + cmp.Or(wl.Name, wl.ID), Nav: "workloads", CSRF: s.csrf,
		Data: workloadData{W: d.workloadRows(r.Context(), []store.Workload{wl})[0], Timeline: tl}})
}

// tokenRow is a token as the list shows it.
type tokenRow struct {
	Owner, Region            string
	Created, Expires, UsedAt time.Time
	// State is outstanding, used or expired.
	State string
}

// shownTokens is how many of the newest tokens the page lists.
const shownTokens = 50

func (d *Dashboard) tokenRows(r *http.Request) ([]tokenRow, error) {
	ts, err := d.cfg.Hub.EnrollTokens(r.Context(), shownTokens)
	rows := make([]tokenRow, 0, len(ts))
	now := d.clk.Now()
	for _, t := range ts {
		row := tokenRow{Owner: t.Owner, Region: t.Region, Created: t.Created, Expires: t.Expires, UsedAt: t.Used, State: "outstanding"}
		switch {
		case !t.Used.IsZero():
			row.State = "used"
		case !now.Before(t.Expires):
			row.State = "expired"
		}
		rows = append(rows, row)
	}
	return rows, err
}

type tokensData struct {
	List               []tokenRow
	AgentURL           string
	Owner, Region, TTL string
	Token              string
	Expires            time.Time
	Command            string
	// Warning says no hub leads the new token's region.
	Warning string
}

func (d *Dashboard) tokens(w http.ResponseWriter, r *http.Request, s session) {
	list, err := d.tokenRows(r)
	if err != nil {
		d.fail(w, r, s, err)
		return
	}
	d.render(w, r, http.StatusOK, "tokens", view{Title: "Tokens", Nav: "tokens", CSRF: s.csrf,
		Data: tokensData{List: list, AgentURL: d.cfg.AgentURL, Region: "local", TTL: hub.DefaultTokenTTL.String()}})
}

func (d *Dashboard) createToken(w http.ResponseWriter, r *http.Request, s session) {
	data := tokensData{AgentURL: d.cfg.AgentURL, Owner: strings.TrimSpace(r.PostFormValue("owner")),
		Region: strings.TrimSpace(r.PostFormValue("region")), TTL: strings.TrimSpace(r.PostFormValue("ttl"))}
	v := view{Title: "Tokens", Nav: "tokens", CSRF: s.csrf, Data: &data}
	ttl, err := time.ParseDuration(data.TTL)
	if err != nil || ttl <= 0 {
		v.Error = fmt.Sprintf("TTL %q: want a duration such as 30m or 24h, between %s and %s", data.TTL, hub.MinTokenTTL, hub.MaxTokenTTL)
		d.render(w, r, http.StatusBadRequest, "tokens", v)
		return
	}
	tok, exp, err := d.cfg.Hub.CreateEnrollToken(r.Context(), data.Owner, data.Region, ttl)
	if err != nil {
		v.Error = err.Error()
		d.render(w, r, http.StatusBadRequest, "tokens", v)
		return
	}
	data.Token, data.Expires = tok.String(), exp
	data.Warning = d.cfg.Hub.UnledWarning(r.Context(), data.Region)
	data.Command = "einsora-agent enroll --hub " + cmp.Or(d.cfg.AgentURL, "https://HUB:8443") + " --token " + data.Token
	v.Notice = "Token created. It is shown once: copy the command now."
	if data.List, err = d.tokenRows(r); err != nil {
		d.fail(w, r, s, err)
		return
	}
	d.render(w, r, http.StatusOK, "tokens", v)
}
