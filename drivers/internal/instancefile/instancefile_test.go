package instancefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNameStaysInsideAndApart(t *testing.T) {
	if got := Name("w-3f9a1c2b7d10"); got != "w-3f9a1c2b7d10" {
		t.Errorf("a plain ID changed: %q", got)
	}
	if Name("a.b") == Name("a_b") {
		t.Error("a.b and a_b share a name")
	}
	if got := Name("../x"); strings.ContainsAny(got, "./") {
		t.Errorf("Name(../x) = %q", got)
	}
}

func TestSaveLoad(t *testing.T) {
	type rec struct{ A int }
	path := RecordPath(t.TempDir(), "w-1")
	if _, err := Load[rec](path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent record: got %v, want ErrNotExist", err)
	}
	if err := Save(path, rec{A: 7}); err != nil {
		t.Fatal(err)
	}
	if r, err := Load[rec](path); err != nil || r.A != 7 {
		t.Errorf("got %+v, %v", r, err)
	}
	os.WriteFile(path, []byte("{"), 0o600)
	if _, err := Load[rec](path); err == nil || !strings.Contains(err.Error(), filepath.Base(path)) {
		t.Errorf("corrupt record: got %v", err)
	}
}
