package sim

import (
	"os"
	"path/filepath"
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
		{"sim:", true},
		{"", true},
		{"sim:start-delay=2s,progress=3,exit-after=1m,exit-code=4", true},
		{"sim:fail=start", true},
		{"sim:hang=list", true},
		{"sim:fail=everything", false},
		{"sim:start-delay=soon", false},
		{"sim:color=blue", false},
		{"docker.io/library/nginx", false},
	}
	for _, tt := range tests {
		_, err := ParseImage(tt.image)
		if (err == nil) != tt.ok {
			t.Errorf("ParseImage(%q): got %v, want ok %v", tt.image, err, tt.ok)
		}
	}
}
