package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/driverstest"
)

func TestConformance(t *testing.T) {
	dir := t.TempDir()
	var d *Driver
	driverstest.Run(t, func(t *testing.T) drivers.Driver {
		var err error
		d, err = New(dir, clock.Real{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}, driverstest.Options{
		Image:        "sim:start-delay=20ms",
		ExitImage:    "sim:exit-after=50ms,exit-code=3",
		ExitCode:     3,
		MissingImage: "sim:fail=image",
		WriteData: func(t *testing.T, w, name, content string) {
			if err := os.WriteFile(filepath.Join(d.DataDir(w), name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		ReadData: func(t *testing.T, w, name string) (string, bool) {
			b, err := os.ReadFile(filepath.Join(d.DataDir(w), name))
			return string(b), err == nil
		},
	})
}

func TestParseImage(t *testing.T) {
	tests := []struct {
		image string
		ok    bool
	}{
		{"sim", true},
		{"sim:", true},
		{"", true},
		{"sim:start-delay=2s,progress=3,exit-after=1m,exit-code=4", true},
		{"sim:fail=start", true},
		{"sim:hang=list", true},
		{"sim:fail=everything", false},
		{"sim:start-delay=soon", false},
		{"sim:color=blue", false},
		{"simulated", false},
		{"docker.io/library/nginx", false},
	}
	for _, tt := range tests {
		_, err := ParseImage(tt.image)
		if (err == nil) != tt.ok {
			t.Errorf("ParseImage(%q): got %v, want ok %v", tt.image, err, tt.ok)
		}
	}
}

// Every sim image string the docs show must start: a newcomer copies them.
// The strings are read from the docs themselves, so an example added there
// is tested too.
func TestDocumentedImagesStart(t *testing.T) {
	images := []string{"sim", "sim:"}
	re := regexp.MustCompile("(?:--image '|`)(sim(?::[^'` ]*)?)(?:'|`)")
	for _, doc := range []string{"../../docs/drivers.md", "../../README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if strings.Contains(m[1], "=D") || strings.Contains(m[1], "=N") || strings.Contains(m[1], "|") {
				continue // the option table's placeholders, not examples
			}
			images = append(images, m[1])
			n++
		}
		if n == 0 {
			t.Fatalf("found no sim image example in %s; the pattern is out of date", doc)
		}
	}
	d, err := New(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i, image := range images {
		w := fmt.Sprintf("w-%d", i)
		if err := d.Start(context.Background(), drivers.Spec{Workload: w, Attempt: 1, Image: image}); err != nil {
			t.Errorf("image %q: %v", image, err)
			continue
		}
		list, err := d.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range list {
			if in.Workload == w && in.State == drivers.StateFailed {
				t.Errorf("image %q: instance failed: %+v", image, in)
			}
		}
	}
	t.Logf("started %d documented images: %q", len(images), images)
}
