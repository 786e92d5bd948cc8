package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestGenDocsWritesManPagesAndCompletions(t *testing.T) {
	root := &cobra.Command{Use: "einsora-test", Short: "A test program"}
	sub := &cobra.Command{Use: "frob", Short: "Frobnicate the widget", RunE: func(*cobra.Command, []string) error { return nil }}
	sub.Flags().String("widget-name", "", "which widget")
	root.AddCommand(sub, GenDocsCmd(root, "1.2.3"))
	dir := t.TempDir()
	root.SetArgs([]string{"gen-docs", dir})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "man1", "einsora-test-frob.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Frobnicate the widget", "--widget-name", "Einsora 1.2.3"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("man page lacks %q:\n%s", want, page)
		}
	}
	// The hidden command documents nothing of its own.
	if _, err := os.Stat(filepath.Join(dir, "man1", "einsora-test-gen-docs.1")); err == nil {
		t.Error("the hidden gen-docs command has a man page")
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		b, err := os.ReadFile(filepath.Join(dir, "completions", shell))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "einsora-test") {
			t.Errorf("%s completion does not name the program", shell)
		}
	}
}
