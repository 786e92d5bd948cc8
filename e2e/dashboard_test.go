package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// findChromium returns a Chromium or Chrome binary, or "".
func findChromium() string {
	if p := os.Getenv("EINSORA_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if p := "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"; fileExists(p) {
		return p
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// The dashboard in a real headless Chromium, over a networked hub and a
// real agent: sign in, make a token in the page and enrol with the command
// it shows, watch the machine come online and a workload run without a
// reload, revoke the machine from the page, and see an agent-supplied name
// with <script> shown as text.
func TestDashboardInChromium(t *testing.T) {
	chrome := findChromium()
	if chrome == "" {
		if os.Getenv("EINSORA_REQUIRE_CHROMIUM") == "1" {
			t.Fatal("EINSORA_REQUIRE_CHROMIUM=1 but no Chromium found (chromium, chromium-browser, google-chrome; or set EINSORA_CHROMIUM); install it: apt-get install chromium")
		}
		t.Skip("no Chromium found (chromium, chromium-browser, google-chrome; or set EINSORA_CHROMIUM): the dashboard's browser test is skipped; EINSORA_REQUIRE_CHROMIUM=1 makes this a failure")
	}
	data, state := t.TempDir(), t.TempDir()
	hubProc, lines := start(t, "einsora-hub", "serve", "--data", data, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--region", "eu-1", "--poll-timeout", "3s", "--allow-sim")
	var adminURL string
	select {
	case line := <-lines:
		if _, rest, ok := strings.Cut(line, "admin API on "); ok {
			adminURL = strings.TrimSuffix(strings.Fields(rest)[0], ",")
		}
	case err := <-hubProc.exited:
		t.Fatalf("hub exited at start: %v\n%s", err, hubProc.logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("hub did not print its addresses\n%s", hubProc.logs)
	}
	admin := func(args ...string) string {
		t.Helper()
		args = append(args, "--hub", adminURL, "--data", data)
		out, err := exec.Command(bin("einsora-hub"), args...).Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("einsora-hub %s: %v: %s\nhub log:\n%s", strings.Join(args, " "), err, ee.Stderr, hubProc.logs)
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	admin("tenant", "create", "acme")
	adminToken, err := os.ReadFile(filepath.Join(data, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(actx)
	defer cancelCtx()
	// The first action starts the browser, without a timeout (that would
	// bind the browser's life); the test's actions each get one.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", chrome, err)
	}
	// A script from an agent's string would show as a dialog.
	dialogs := make(chan string, 4)
	if err := chromedp.Listen(ctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			select {
			case dialogs <- d.Message:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v\nhub log:\n%s", what, err, hubProc.logs)
		}
	}
	text := func(what string, sel chromedp.CSS) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	mark := chromedp.Evaluate[chromedp.Void](`window.__einsoraMarker = 42; undefined`)
	// waitJS waits until expr is true in the open page; the marker set at
	// navigation must survive, or the page was reloaded.
	waitJS := func(what, expr string) {
		t.Helper()
		do(what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(200*time.Millisecond)))
		if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__einsoraMarker === 42`)); err != nil || !ok {
			t.Fatalf("%s: the page was reloaded (%v)", what, err)
		}
	}

	// 1. Sign in with the admin token.
	do("sign in", chromedp.Navigate(adminURL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), strings.TrimSpace(string(adminToken))),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`nav`)))

	// 2. A token made in the page; enrol with the command it shows.
	do("create a token", chromedp.Navigate(adminURL+"/ui/tokens"),
		chromedp.SetValue(chromedp.CSS(`#owner`), "acme"),
		chromedp.SetValue(chromedp.CSS(`#region`), "eu-1"),
		chromedp.SetValue(chromedp.CSS(`#ttl`), "10m"),
		chromedp.Submit(chromedp.CSS(`#owner`)),
		chromedp.WaitVisible(chromedp.CSS(`#enroll-command`)))
	command := text("read the command", `#enroll-command`)
	fields := strings.Fields(command)
	if len(fields) != 6 || fields[0] != "einsora-agent" || fields[1] != "enroll" || fields[2] != "--hub" || !strings.HasPrefix(fields[3], "https://127.0.0.1:") || fields[4] != "--token" {
		t.Fatalf("the page shows the command %q", command)
	}
	const evil = `<script>alert("owned")</script>`
	out, err := exec.Command(bin("einsora-agent"), append(fields[1:], "--state-dir", state, "--name", evil)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
	machineBytes, _ := os.ReadFile(filepath.Join(state, "machine-id"))
	machineID := strings.TrimSpace(string(machineBytes))
	row := fmt.Sprintf(`document.querySelector('tr[data-machine=%q] .state')`, machineID)

	// 3. The machine goes online in the open page.
	do("open the machines page", chromedp.Navigate(adminURL+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`table.list`)), mark)
	if got := text("read the state", chromedp.CSS(`tr[data-machine="`+machineID+`"] .state`)); got != "offline" {
		t.Errorf("an enrolled machine that never synced shows %q, want offline", got)
	}
	metricsAddr := freeAddr(t)
	start(t, "einsora-agent", "run", "--drivers", "sim", "--state-dir", state, "--metrics", metricsAddr)
	waitJS("the machine to show online", row+` && `+row+`.textContent.trim() === "online"`)
	shoot(t, ctx, "machines")

	// 4. A workload made with the CLI reaches running in the open page.
	id := admin("workload", "create", "--tenant", "acme", "--name", "web", "--kind", "container", "--class", "cpu-1", "--region", "eu-1", "--image", "sim:")
	do("open the workload page", chromedp.Navigate(adminURL+"/ui/workloads/"+id), chromedp.WaitVisible(chromedp.CSS(`dl.facts`)), mark)
	waitJS("the workload to show running", `document.querySelector('dd.state') && document.querySelector('dd.state').textContent.includes("running")`)
	shoot(t, ctx, "workload")
	checkAgentMetrics(t, "http://"+metricsAddr+"/metrics")

	// 6. The agent's name is text, never markup.
	do("open the machine page", chromedp.Navigate(adminURL+"/ui/machines/"+machineID), chromedp.WaitVisible(chromedp.CSS(`dd.name`)))
	name := text("read the name", `dd.name`)
	scripts, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('script').length`))
	if err != nil || name != evil || scripts != 1 {
		t.Errorf("machine name shows as %q with %d script elements (%v); want the text %q and only the dashboard's script", name, scripts, err, evil)
	}
	shoot(t, ctx, "machine")

	// 5. Revoke from the page, through its confirmation.
	do("revoke", chromedp.Click(chromedp.CSS(`a.button.danger`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
		chromedp.SendKeys(chromedp.CSS(`#confirm`), machineID),
		chromedp.Submit(chromedp.CSS(`#confirm`)),
		chromedp.WaitVisible(chromedp.CSS(`dd.state .badge.revoked`)))
	do("open the machines page", chromedp.Navigate(adminURL+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`table.list`)), mark)
	waitJS("the machine to show revoked", row+` && `+row+`.textContent.trim() === "revoked"`)
	select {
	case msg := <-dialogs:
		t.Errorf("a script ran in the dashboard: dialog %q", msg)
	default:
	}
}

// shoot saves the page at desktop and phone widths when
// EINSORA_SCREENSHOTS names a directory, for a person to look at.
func shoot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("EINSORA_SCREENSHOTS")
	if dir == "" {
		return
	}
	for _, size := range []struct {
		label         string
		width, height int64
		mobile        bool
	}{{"desktop", 1280, 900, false}, {"phone", 390, 844, true}} {
		vopts := []chromedp.EmulateViewportOption{}
		if size.mobile {
			vopts = append(vopts, chromedp.EmulateMobile, chromedp.EmulateScale(2))
		}
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(size.width, size.height, vopts...)); err != nil {
			t.Logf("viewport %s: %v", size.label, err)
			continue
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Logf("screenshot %s %s: %v", name, size.label, err)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name+"-"+size.label+".png"), png, 0o644); err != nil {
			t.Log(err)
		}
	}
	chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900))
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// checkAgentMetrics reads `einsora-agent run --metrics` while a workload
// runs: the key series are there and tell the truth.
func checkAgentMetrics(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("agent metrics: %v", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("agent metrics do not parse: %v", err)
	}
	has := func(name string, min float64, labels ...string) {
		t.Helper()
	next:
		for _, m := range fams[name].GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue next
				}
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			if v < min {
				t.Errorf("agent metric %s%v = %v, want at least %v", name, labels, v, min)
			}
			return
		}
		t.Errorf("agent metrics lack %s%v", name, labels)
	}
	has("einsora_agent_syncs_total", 1, "result", "ok")
	has("einsora_agent_driver_call_seconds", 1, "driver", "sim", "call", "start", "result", "ok")
	has("einsora_agent_workloads", 1, "driver", "sim", "state", "running")
	has("einsora_agent_apply_pass_seconds", 1)
	has("einsora_agent_inventory_probe_seconds", 1)
}

// Solo serves the dashboard too, and `einsora-hub dashboard` signs in to it
// once with the link it prints.
func TestSoloDashboardSignInLink(t *testing.T) {
	s := startSolo(t, t.TempDir())
	out, err := s.hub("dashboard", "--no-open")
	link := strings.TrimSpace(out)
	if err != nil {
		t.Fatalf("einsora-hub dashboard: %v", err)
	}
	if !strings.HasPrefix(link, s.url+"/ui/login/link?code=") {
		t.Fatalf("einsora-hub dashboard printed %q", link)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(link); code != http.StatusOK || !strings.Contains(body, "Sign out") || !strings.Contains(body, "data-machine=") {
		t.Fatalf("the sign-in link: %d, want the machines page with solo's machine", code)
	}
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the sign-in link's second use: %s, want 401", resp.Status)
	}
}
