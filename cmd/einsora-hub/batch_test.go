package main

import (
	"strings"
	"testing"

	"einsora.dev/edge/hub/adminapi"
)

// A call takes at most MaxCreateBatch workloads and MaxBatchBody bytes,
// and a file's workloads are cut into calls in order, none left out.
func TestBatchEndsAtCountAndSize(t *testing.T) {
	small := make([]adminapi.CreateWorkload, 2500)
	for i := range small {
		small[i] = adminapi.CreateWorkload{Tenant: "t", Name: "w", Kind: "container", Class: "c", Region: "r"}
	}
	big := make([]adminapi.CreateWorkload, 100)
	for i := range big {
		big[i] = small[i]
		big[i].Command = []string{strings.Repeat("x", 200<<10)}
	}
	for _, tt := range []struct {
		name string
		cws  []adminapi.CreateWorkload
		want []int
	}{
		{"count", small, []int{1000, 2000, 2500}},
		{"size", big, []int{40, 80, 100}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			for start := 0; start < len(tt.cws); {
				end, err := batchEnd(tt.cws, start)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, end)
				start = end
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got ends %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got ends %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestReadWorkloadsArrayOrLines(t *testing.T) {
	one := `{"tenant":"t","name":"a","kind":"container","class":"c","region":"r"}`
	for _, in := range []string{"[" + one + "," + one + "]", one + "\n" + one + "\n", "  [\n" + one + ",\n" + one + "\n]\n"} {
		cws, err := readWorkloads(strings.NewReader(in), "f")
		if err != nil || len(cws) != 2 {
			t.Errorf("%q: got %d workloads, %v; want 2", in, len(cws), err)
		}
	}
	for in, want := range map[string]string{
		"[" + one + "," + one:                "f:",
		one + "]":                            "trailing data",
		`[{"tenant":"t","name":"a"}]`:        `workload 1 (a): "kind" is required`,
		one + "\n" + `{"tenant":"t","x":1}`:  `workload 2: json: unknown field "x"`,
		"":                                   "no workloads",
		strings.Replace(one, `"c"`, `""`, 1): `"class" is required`,
	} {
		if _, err := readWorkloads(strings.NewReader(in), "f"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error saying %q", in, err, want)
		}
	}
}
