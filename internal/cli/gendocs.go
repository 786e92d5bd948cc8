package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// GenDocsCmd is a hidden command that writes the man pages (DIR/man1) and
// the bash, zsh and fish completions (DIR/completions) of root, so the
// packages ship what the commands really take. The man pages' date comes
// from SOURCE_DATE_EPOCH when set, so builds of one commit agree.
func GenDocsCmd(root *cobra.Command, version string) *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "Write man pages and shell completions into DIR (for packaging)",
		Hidden: true,
		Args:   Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return GenDocs(root, version, args[0])
		},
	}
}

// GenDocs writes root's man pages into dir/man1 and its completions into
// dir/completions/{bash,zsh,fish}.
func GenDocs(root *cobra.Command, version, dir string) error {
	man := filepath.Join(dir, "man1")
	comp := filepath.Join(dir, "completions")
	for _, d := range []string{man, comp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("gen-docs: %w", err)
		}
	}
	root.DisableAutoGenTag = true
	header := &doc.GenManHeader{Title: root.Name(), Section: "1", Source: "Einsora " + version, Manual: "Einsora manual"}
	if err := doc.GenManTree(root, header, man); err != nil {
		return fmt.Errorf("gen-docs: man pages: %w", err)
	}
	for _, c := range []struct {
		name string
		gen  func(f *os.File) error
	}{
		{"bash", func(f *os.File) error { return root.GenBashCompletionV2(f, true) }},
		{"zsh", func(f *os.File) error { return root.GenZshCompletion(f) }},
		{"fish", func(f *os.File) error { return root.GenFishCompletion(f, true) }},
	} {
		if err := writeWith(filepath.Join(comp, c.name), c.gen); err != nil {
			return fmt.Errorf("gen-docs: %s completion: %w", c.name, err)
		}
	}
	return nil
}

func writeWith(path string, gen func(f *os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := gen(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
