package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/internal/cli"
	"einsora.dev/edge/protocol"
)

// maxWorkloadsFile bounds what `workload create --file` reads: far more
// workloads than one region holds, far less than would strain the CLI.
const maxWorkloadsFile = 64 << 20

// readWorkloads reads the workloads a file lists: a JSON array of objects,
// or objects one after another (JSON lines), each with the fields of POST
// /v1/workloads. Each is checked as `workload create` checks its flags, so
// a mistake is refused, with its place in the file, before anything is
// sent.
func readWorkloads(r io.Reader, name string) ([]adminapi.CreateWorkload, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxWorkloadsFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > maxWorkloadsFile {
		return nil, cli.Usagef("%s: over %d MiB; split it", name, maxWorkloadsFile>>20)
	}
	b = bytes.TrimSpace(b)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	array := len(b) > 0 && b[0] == '['
	if array {
		if _, err := dec.Token(); err != nil {
			return nil, cli.Usagef("%s: %v", name, err)
		}
	}
	var out []adminapi.CreateWorkload
	for dec.More() {
		var cw adminapi.CreateWorkload
		if err := dec.Decode(&cw); err != nil {
			return nil, cli.Usagef("%s: workload %d: %v", name, len(out)+1, err)
		}
		if err := checkWorkload(cw); err != nil {
			return nil, cli.Usagef("%s: workload %d (%s): %v", name, len(out)+1, cw.Name, err)
		}
		out = append(out, cw)
	}
	if array {
		if _, err := dec.Token(); err != nil {
			return nil, cli.Usagef("%s: %v", name, err)
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, cli.Usagef("%s: trailing data after the workloads", name)
	}
	if len(out) == 0 {
		return nil, cli.Usagef("%s: no workloads in it", name)
	}
	return out, nil
}

// createRequired are the fields every workload needs, as flags of
// `workload create` and in a file's entries.
var createRequired = []string{"tenant", "name", "kind", "class", "region"}

// checkWorkload is what the CLI can check of one workload without the
// hub: its required fields, its kind and its spec.
func checkWorkload(cw adminapi.CreateWorkload) error {
	values := map[string]string{"tenant": cw.Tenant, "name": cw.Name, "kind": cw.Kind, "class": cw.Class, "region": cw.Region}
	for _, f := range createRequired {
		if values[f] == "" {
			return fmt.Errorf("%q is required", f)
		}
	}
	if err := checkKind(cw.Kind); err != nil {
		return err
	}
	return cw.WorkloadSpec.Validate()
}

func checkKind(kind string) error {
	if !protocol.Kind(kind).Valid() {
		return fmt.Errorf("unknown kind %q: want container, vm, notebook or endpoint", kind)
	}
	return nil
}

// batchEnd is where the call that starts at cws[start] ends: at most
// adminapi.MaxCreateBatch workloads, in at most adminapi.MaxBatchBody bytes.
func batchEnd(cws []adminapi.CreateWorkload, start int) (int, error) {
	size := len(`{"workloads":[]}`)
	end := start
	for end < len(cws) && end-start < adminapi.MaxCreateBatch {
		b, err := json.Marshal(cws[end])
		if err != nil {
			return 0, err
		}
		if size+len(b)+1 > adminapi.MaxBatchBody {
			break
		}
		size += len(b) + 1
		end++
	}
	if end == start {
		return 0, fmt.Errorf("workload %d (%s) is over %d bytes on its own", start+1, cws[start].Name, adminapi.MaxBatchBody)
	}
	return end, nil
}

// createFromFile creates the workloads of file ("-" for standard input),
// adminapi.MaxCreateBatch to a call (fewer where their size asks it), each
// call all or none, and prints their IDs in the file's order. Past one
// call it says how far it got on standard error; should a call fail, the
// IDs printed are those created.
func createFromFile(cmd *cobra.Command, g *globals, file string) error {
	var in io.Reader = cmd.InOrStdin()
	name := "standard input"
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		in, name = f, file
	}
	cws, err := readWorkloads(in, name)
	if err != nil {
		return err
	}
	// Every call is cut before the first is sent.
	var ends []int
	for start := 0; start < len(cws); {
		end, err := batchEnd(cws, start)
		if err != nil {
			return cli.Usagef("%s: %v", name, err)
		}
		ends = append(ends, end)
		start = end
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	warned := make(map[string]bool)
	start := 0
	for _, end := range ends {
		ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
		created, err := c.CreateWorkloads(ctx, cws[start:end])
		cancel()
		if err != nil {
			if start == 0 {
				return fmt.Errorf("%s: nothing created: %w", name, err)
			}
			return fmt.Errorf("%s: workloads %d to %d not created, nor any after them: %w; the %d before them were (their IDs are printed above)",
				name, start+1, end, err, start)
		}
		if len(created.Workloads) != end-start {
			return errors.New("the hub answered a batch with another number of workloads; see its log")
		}
		for _, w := range created.Workloads {
			fmt.Fprintln(out, w.ID)
		}
		if !warned[created.Warning] {
			warned[created.Warning] = true
			warn(cmd, created.Warning)
		}
		if len(ends) > 1 {
			fmt.Fprintf(cmd.ErrOrStderr(), "created %d of %d\n", end, len(cws))
		}
		start = end
	}
	return nil
}
