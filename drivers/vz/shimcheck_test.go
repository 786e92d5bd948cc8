package vz

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var updateShimAPI = flag.Bool("update-shim-api", false, "rewrite testdata/shim-vz-api.txt")

const vzModule = "github.com/Code-Hex/vz/v3"

// TestShimTypeChecks checks shim_darwin.go without a Mac: the package's
// darwin/arm64/cgo files are type-checked with go/types against the
// source of vz v3.7.1 in the module cache (cgo faked with FakeImportC),
// and every vz identifier the shim uses is listed with its signature in
// testdata/shim-vz-api.txt, so a vz upgrade that changes one shows here.
func TestShimTypeChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks vz from source")
	}
	env := append(os.Environ(), "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=1")
	out, err := runGo(env, "list", "-m", "-f", "{{.Version}}", vzModule)
	if err != nil {
		t.Skipf("vz module not available: %v", err)
	}
	if v := strings.TrimSpace(out); v != "v3.7.1" {
		t.Fatalf("go.mod has %s %s; the shim is checked against v3.7.1", vzModule, v)
	}
	// Every non-standard package the darwin build needs, and its directory.
	out, err = runGo(env, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.Dir}}{{end}}", ".")
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	dirs := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if p, d, ok := strings.Cut(sc.Text(), " "); ok {
			dirs[p] = d
		}
	}
	self := dirs["einsora.dev/edge/drivers/vz"]
	if self == "" {
		t.Fatalf("go list did not list this package:\n%s", out)
	}

	ctxt := build.Default
	ctxt.GOOS, ctxt.GOARCH, ctxt.CgoEnabled = "darwin", "arm64", true
	stdCtxt := build.Default
	stdCtxt.GOOS, stdCtxt.GOARCH, stdCtxt.CgoEnabled = "darwin", "arm64", false

	fset := token.NewFileSet()
	// The standard library from source for darwin, without cgo (the shim
	// needs none of its cgo parts).
	// The source importer reads build.Default while it imports.
	saved := build.Default
	build.Default = stdCtxt
	t.Cleanup(func() { build.Default = saved })
	std := importer.ForCompiler(fset, "source", nil).(types.ImporterFrom)

	imp := &shimImporter{fset: fset, ctxt: ctxt, dirs: dirs, std: std, pkgs: map[string]*types.Package{}, errs: map[string][]error{}}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, files, err := imp.check("einsora.dev/edge/drivers/vz", self, info)
	if err != nil {
		t.Fatal(err)
	}
	var shim *ast.File
	for _, f := range files {
		if filepath.Base(fset.File(f.Pos()).Name()) == "shim_darwin.go" {
			shim = f
		}
	}
	if shim == nil {
		t.Fatal("shim_darwin.go was not selected for darwin/arm64/cgo")
	}
	for _, e := range imp.errs[pkg.Path()] {
		t.Errorf("type error: %v", e)
	}
	if n := len(imp.errs[vzModule]); n > 0 {
		t.Logf("vz itself: %d errors from faked cgo (ignored), first: %v", n, imp.errs[vzModule][0])
	}

	// The vz API the shim uses, one line per object.
	seen := map[string]bool{}
	for id, obj := range info.Uses {
		if obj.Pkg() == nil || obj.Pkg().Path() != vzModule {
			continue
		}
		if fset.File(id.Pos()) != fset.File(shim.Pos()) {
			continue
		}
		seen[types.ObjectString(obj, types.RelativeTo(obj.Pkg()))] = true
	}
	var lines []string
	for l := range seen {
		lines = append(lines, l)
	}
	sort.Strings(lines)
	got := strings.Join(lines, "\n") + "\n"
	golden := filepath.Join("testdata", "shim-vz-api.txt")
	if *updateShimAPI {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update-shim-api to write it)", err)
	}
	if got != string(want) {
		t.Errorf("the vz API the shim uses changed; diff against %s:\ngot:\n%s", golden, got)
	}
	if len(lines) < 30 {
		t.Errorf("only %d vz identifiers resolved in the shim", len(lines))
	}
}

func runGo(env []string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Env = env
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		return out.String() + stderr.String(), err
	}
	return out.String(), nil
}

// shimImporter type-checks non-standard packages from their source for
// darwin/arm64 with cgo faked, and the standard library with std.
type shimImporter struct {
	fset *token.FileSet
	ctxt build.Context
	dirs map[string]string
	std  types.ImporterFrom
	pkgs map[string]*types.Package
	errs map[string][]error
}

func (s *shimImporter) Import(path string) (*types.Package, error) {
	return s.ImportFrom(path, "", 0)
}

func (s *shimImporter) ImportFrom(path, dir string, mode types.ImportMode) (*types.Package, error) {
	if p := s.pkgs[path]; p != nil {
		return p, nil
	}
	d, ok := s.dirs[path]
	if !ok {
		return s.std.ImportFrom(path, dir, mode)
	}
	p, _, err := s.check(path, d, nil)
	return p, err
}

func (s *shimImporter) check(path, dir string, info *types.Info) (*types.Package, []*ast.File, error) {
	bp, err := s.ctxt.ImportDir(dir, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	var files []*ast.File
	for _, name := range append(append([]string{}, bp.GoFiles...), bp.CgoFiles...) {
		f, err := parser.ParseFile(s.fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
	}
	conf := types.Config{
		Importer:    s,
		FakeImportC: true,
		Sizes:       types.SizesFor("gc", "arm64"),
		Error:       func(err error) { s.errs[path] = append(s.errs[path], err) },
	}
	if info == nil {
		info = &types.Info{}
	}
	p, _ := conf.Check(path, s.fset, files, info)
	s.pkgs[path] = p
	return p, files, nil
}
