package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `workload create --file` creates what a file lists, a JSON array or one
// object a line, in the file's order, and refuses a bad file before it
// sends anything.
func TestCLICreatesWorkloadsFromAFile(t *testing.T) {
	s := startSolo(t, t.TempDir())
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	entry := func(name string) string {
		return fmt.Sprintf(`{"tenant":"local","name":%q,"kind":"container","class":"cpu-1","region":"local","image":"sim:","env":{"WHO":%q}}`, name, name)
	}
	array := write("array.json", "[\n"+entry("a-1")+",\n"+entry("a-2")+"\n]\n")
	lines := write("lines.json", entry("l-1")+"\n"+entry("l-2")+"\n"+entry("l-3")+"\n")

	ids := strings.Fields(s.must("workload", "create", "--file", array))
	ids = append(ids, strings.Fields(s.must("workload", "create", "-f", lines))...)
	want := []string{"a-1", "a-2", "l-1", "l-2", "l-3"}
	if len(ids) != len(want) {
		t.Fatalf("got ids %q, want %d", ids, len(want))
	}
	for i, id := range ids {
		var w struct {
			Name string            `json:"name"`
			Env  map[string]string `json:"env"`
		}
		if err := json.Unmarshal([]byte(s.must("workload", "show", id, "--json")), &w); err != nil {
			t.Fatal(err)
		}
		if w.Name != want[i] || w.Env["WHO"] != want[i] {
			t.Errorf("id %d (%s): got %s with env %v, want %s", i, id, w.Name, w.Env, want[i])
		}
	}
	s.wait(ids[0], "running") // the machine has room for two

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"bad_kind", []string{"--file", write("kind.json", entry("k-1")+"\n"+strings.Replace(entry("k-2"), "container", "spaceship", 1))}, "workload 2 (k-2): unknown kind"},
		{"unknown_field", []string{"--file", write("field.json", `[{"tenant":"local","nmae":"x"}]`)}, `unknown field "nmae"`},
		{"empty", []string{"--file", write("empty.json", "[]")}, "no workloads"},
		{"flags_too", []string{"--file", array, "--name", "x"}, "drop --name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin("einsora-hub"), append(append([]string{"workload", "create"}, tt.args...), "--hub", s.url, "--data", s.data)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("got %v, stderr %q; want exit 2 saying %q", err, stderr.String(), tt.want)
			}
		})
	}
	// The refused files created nothing.
	var all []json.RawMessage
	if err := json.Unmarshal([]byte(s.must("workload", "ls", "--json")), &all); err != nil || len(all) != len(want) {
		t.Errorf("after refused files: %d workloads (%v), want %d", len(all), err, len(want))
	}

	// One the hub refuses (a class it lacks) is refused whole.
	cmd := exec.Command(bin("einsora-hub"), "workload", "create", "--file", "-", "--hub", s.url, "--data", s.data)
	cmd.Stdin = strings.NewReader(entry("c-1") + "\n" + strings.Replace(entry("c-2"), "cpu-1", "huge", 1))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `nothing created: workload 2 of 2 (c-2): invalid: no class "huge"`) {
		t.Errorf("a class the hub lacks: got %v, %q", err, out)
	}
}
