package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/trust"
	"einsora.dev/edge/protocol"
)

// ErrInvalid is wrapped by errors about what an operator asked for; the
// admin API answers them with 400.
var ErrInvalid = errors.New("invalid")

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

func checkName(what, name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%w: %s %q: use 1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, what, name)
	}
	return nil
}

// CreateTenant adds a tenant.
func (h *Hub) CreateTenant(ctx context.Context, name string) error {
	if err := checkName("tenant", name); err != nil {
		return err
	}
	return h.store.Update(ctx, func(tx store.Tx) error {
		return tx.CreateTenant(store.Tenant{Name: name, Created: h.clk.Now()})
	})
}

// EnsureTenant adds a tenant unless it exists.
func (h *Hub) EnsureTenant(ctx context.Context, name string) error {
	err := h.CreateTenant(ctx, name)
	if errors.Is(err, store.ErrExists) {
		return nil
	}
	return err
}

// CreateClass adds or replaces a class.
func (h *Hub) CreateClass(ctx context.Context, c store.Class) error {
	if err := checkName("class", c.Name); err != nil {
		return err
	}
	switch c.Accelerator {
	case "none", "apple-gpu", "nvidia-gpu", "amd-gpu":
	default:
		return fmt.Errorf("%w: accelerator %q: want none, apple-gpu, nvidia-gpu or amd-gpu", ErrInvalid, c.Accelerator)
	}
	if c.CPUs < 0 || c.MemoryMB < 0 || c.Devices < 0 || (c.Accelerator == "none") != (c.Devices == 0) {
		return fmt.Errorf("%w: class %s: counts must be positive, and devices set exactly when there is an accelerator", ErrInvalid, c.Name)
	}
	return h.store.Update(ctx, func(tx store.Tx) error { return tx.PutClass(c) })
}

// WorkloadSpec is what a user asks for.
type WorkloadSpec struct {
	Tenant string
	Name   string
	Kind   protocol.Kind
	Class  string
	Region string
	Image  string
	// Spec is what it runs beyond its image; checked by Validate and its
	// secrets sealed before anything is stored.
	Spec protocol.WorkloadSpec
}

// MaxCreateBatch is the most workloads one CreateWorkloads call takes.
// They are written in one transaction, so it bounds how long a call holds
// the store's writer (1,000 take tens of milliseconds on SQLite).
const MaxCreateBatch = 1000

// CreateWorkload records a new workload, pending admission, and returns it.
func (h *Hub) CreateWorkload(ctx context.Context, spec WorkloadSpec) (store.Workload, error) {
	ws, err := h.CreateWorkloads(ctx, []WorkloadSpec{spec})
	if err != nil {
		return store.Workload{}, err
	}
	return ws[0], nil
}

// CreateWorkloads records new workloads, pending admission, all or none,
// and returns them in the order asked. One call is one transaction and one
// wake of the controller, where as many separate creates cost a
// transaction, an admin request and a wake each. An error about one
// workload of several names it by its place in specs, from 1.
func (h *Hub) CreateWorkloads(ctx context.Context, specs []WorkloadSpec) ([]store.Workload, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("%w: no workloads to create", ErrInvalid)
	}
	if len(specs) > MaxCreateBatch {
		return nil, fmt.Errorf("%w: %d workloads in one call: at most %d; send them in batches", ErrInvalid, len(specs), MaxCreateBatch)
	}
	now := h.clk.Now()
	ws := make([]store.Workload, len(specs))
	for i, spec := range specs {
		w, err := h.newWorkload(spec, now)
		if err != nil {
			return nil, which(specs, i, err)
		}
		ws[i] = w
	}
	err := h.store.Update(ctx, func(tx store.Tx) error {
		// A tenant or class is read once however many workloads name it.
		known := make(map[string]bool)
		for i, w := range ws {
			if err := checkOwnerAndClass(tx, w, known); err != nil {
				return which(specs, i, err)
			}
			if err := tx.CreateWorkload(w); err != nil {
				return err
			}
			if err := timeline(tx, now, w.ID, fmt.Sprintf("created: %s %s of class %s in region %s", w.Kind, w.Name, w.Class, w.Region)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	h.wakeLeader(ctx, false)
	return ws, nil
}

// which names the workload err is about when there are several.
func which(specs []WorkloadSpec, i int, err error) error {
	if len(specs) == 1 {
		return err
	}
	return fmt.Errorf("workload %d of %d (%s): %w", i+1, len(specs), trust.Text(specs[i].Name, 64), err)
}

// newWorkload checks what a user asked for and makes the workload to
// store, its secrets sealed.
func (h *Hub) newWorkload(spec WorkloadSpec, now time.Time) (store.Workload, error) {
	if err := checkName("name", spec.Name); err != nil {
		return store.Workload{}, err
	}
	if !spec.Kind.Valid() {
		return store.Workload{}, fmt.Errorf("%w: kind %q: want container, vm, notebook or endpoint", ErrInvalid, spec.Kind)
	}
	if spec.Region == "" {
		return store.Workload{}, fmt.Errorf("%w: a region is needed", ErrInvalid)
	}
	if len(spec.Image) > 512 {
		return store.Workload{}, fmt.Errorf("%w: image name longer than 512 bytes", ErrInvalid)
	}
	for field, v := range map[string]string{"image": spec.Image, "region": spec.Region, "tenant": spec.Tenant, "class": spec.Class} {
		if trust.Text(v, len(v)) != v {
			return store.Workload{}, fmt.Errorf("%w: %s %q holds characters that are not printable; use plain text", ErrInvalid, field, trust.Text(v, 512))
		}
	}
	w := store.Workload{
		ID: newWorkloadID(), Name: spec.Name, Tenant: spec.Tenant, Kind: spec.Kind, Class: spec.Class,
		Region: spec.Region, Image: spec.Image, State: store.StatePending, Created: now, Since: now,
		Reason: "waiting for the controller of region " + spec.Region + " to place it",
	}
	var err error
	if w.Spec, err = h.sealSpec(w.ID, spec.Spec); err != nil {
		return store.Workload{}, err
	}
	return w, nil
}

// checkOwnerAndClass refuses a workload whose tenant or class does not
// exist; known remembers those found, by "tenant:" or "class:" and name.
func checkOwnerAndClass(tx store.Tx, w store.Workload, known map[string]bool) error {
	if !known["tenant:"+w.Tenant] {
		if _, err := tx.Tenant(w.Tenant); errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: no tenant %q; create it with: einsora-hub tenant create %s", ErrInvalid, w.Tenant, w.Tenant)
		} else if err != nil {
			return err
		}
		known["tenant:"+w.Tenant] = true
	}
	if !known["class:"+w.Class] {
		if _, err := tx.Class(w.Class); errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: no class %q; see: einsora-hub class ls", ErrInvalid, w.Class)
		} else if err != nil {
			return err
		}
		known["class:"+w.Class] = true
	}
	return nil
}

func newWorkloadID() string {
	var b [6]byte
	rand.Read(b[:])
	return "w-" + hex.EncodeToString(b[:])
}

// RunWorkload asks for a stopped or failed workload to run again. It waits
// for admission, which makes a new attempt.
func (h *Hub) RunWorkload(ctx context.Context, id string) error {
	return h.change(ctx, id, func(tx store.Tx, w *store.Workload, wakes *changes) error {
		switch w.State {
		case store.StateStopped, store.StateFailed, store.StateStopping:
			return move(tx, h.clk.Now(), w, store.StatePending, "", "asked to run", wakes)
		case store.StateDeleting:
			return fmt.Errorf("%w: workload %s is being deleted", ErrInvalid, id)
		}
		return nil
	})
}

// ParkWorkload stops a workload, keeping its data.
func (h *Hub) ParkWorkload(ctx context.Context, id string) error {
	return h.change(ctx, id, func(tx store.Tx, w *store.Workload, wakes *changes) error {
		switch w.State {
		case store.StateProvisioning, store.StateRunning:
			return move(tx, h.clk.Now(), w, store.StateStopping, "", "asked to stop", wakes)
		case store.StatePending, store.StateQueued:
			return move(tx, h.clk.Now(), w, store.StateStopped, "", "asked to stop before it was placed", wakes)
		case store.StateDeleting:
			return fmt.Errorf("%w: workload %s is being deleted", ErrInvalid, id)
		}
		return nil
	})
}

// DeleteWorkload removes a workload and its data: at once when no machine
// holds it, else once its machine says it removed it.
func (h *Hub) DeleteWorkload(ctx context.Context, id string) error {
	return h.change(ctx, id, func(tx store.Tx, w *store.Workload, wakes *changes) error {
		if w.Machine == "" {
			if err := timeline(tx, h.clk.Now(), w.ID, "deleted"); err != nil {
				return err
			}
			return tx.DeleteWorkload(w.ID)
		}
		if w.State == store.StateDeleting {
			return nil
		}
		return move(tx, h.clk.Now(), w, store.StateDeleting, "", "asked to delete; removing it and its data from machine "+w.Machine, wakes)
	})
}

func (h *Hub) change(ctx context.Context, id string, fn func(tx store.Tx, w *store.Workload, wakes *changes) error) error {
	var (
		wakes   changes
		machine string
	)
	err := h.store.Update(ctx, func(tx store.Tx) error {
		wakes = wakes[:0]
		w, err := tx.Workload(id)
		if err != nil {
			return err
		}
		machine = w.Machine
		return fn(tx, &w, &wakes)
	})
	if err != nil {
		return err
	}
	tell(h.backend, wakes)
	// A stop, park or delete frees what the workload held, on its machine
	// (a move out of stopping changes no mode, so wakes no machine).
	h.wakeLeader(ctx, true, machine)
	return nil
}

// Workload returns one workload.
func (h *Hub) Workload(ctx context.Context, id string) (w store.Workload, err error) {
	err = h.store.View(ctx, func(tx store.Tx) error { w, err = tx.Workload(id); return err })
	return w, err
}

// Workloads returns every workload.
func (h *Hub) Workloads(ctx context.Context) (ws []store.Workload, err error) {
	err = h.store.View(ctx, func(tx store.Tx) error { ws, err = tx.Workloads(store.WorkloadFilter{}); return err })
	return ws, err
}

// Timeline returns a workload's history.
func (h *Hub) Timeline(ctx context.Context, id string) (es []store.TimelineEntry, err error) {
	err = h.store.View(ctx, func(tx store.Tx) error {
		if _, err := tx.Workload(id); err != nil {
			return err
		}
		es, err = tx.Timeline(id)
		return err
	})
	return es, err
}

// Tenants returns every tenant.
func (h *Hub) Tenants(ctx context.Context) (ts []store.Tenant, err error) {
	err = h.store.View(ctx, func(tx store.Tx) error { ts, err = tx.Tenants(); return err })
	return ts, err
}

// Classes returns every class.
func (h *Hub) Classes(ctx context.Context) (cs []store.Class, err error) {
	err = h.store.View(ctx, func(tx store.Tx) error { cs, err = tx.Classes(); return err })
	return cs, err
}
