package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

func testDeleteStatus(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error {
		for _, w := range []string{"w-1", "w-2"} {
			if err := tx.PutStatus(store.StatusRecord{Machine: "m-1", At: at, Status: protocol.Status{Workload: w, Code: protocol.CodeRunning}}); err != nil {
				return err
			}
		}
		if err := tx.PutStatus(store.StatusRecord{Machine: "m-2", At: at, Status: protocol.Status{Workload: "w-1", Code: protocol.CodeRunning}}); err != nil {
			return err
		}
		if err := tx.DeleteStatus("m-1", "w-1"); err != nil {
			return err
		}
		return tx.DeleteStatus("m-1", "never-there")
	})
	view(t, s, func(tx store.Tx) error {
		one, _ := tx.Statuses("m-1")
		two, _ := tx.Statuses("m-2")
		if len(one) != 1 || one[0].Workload != "w-2" || len(two) != 1 {
			t.Errorf("m-1 holds %+v, m-2 %+v; want w-2 alone on m-1 and m-2 untouched", one, two)
		}
		return nil
	})
}

func timelineTexts(t *testing.T, s store.Store, workload string) []string {
	t.Helper()
	var texts []string
	view(t, s, func(tx store.Tx) error {
		es, err := tx.Timeline(workload)
		for _, e := range es {
			texts = append(texts, e.Text)
		}
		return err
	})
	return texts
}

func testTimelineBounds(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error {
		if _, err := tx.LastTimeline("w-1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("last line of an empty timeline: got %v, want ErrNotFound", err)
		}
		for i := range 10 {
			if err := tx.AddTimeline(store.TimelineEntry{Workload: "w-1", At: at.Add(time.Duration(i) * time.Second), Text: fmt.Sprint(i)}); err != nil {
				return err
			}
		}
		// Another workload's lines are never touched.
		return tx.AddTimeline(store.TimelineEntry{Workload: "w-2", At: at, Text: "other"})
	})
	update(t, s, func(tx store.Tx) error {
		e := store.TimelineEntry{Workload: "w-1", At: at.Add(time.Minute), Text: "9 (×3)", Kind: "rebooted", Count: 3, First: at}
		if err := tx.ReplaceLastTimeline(e); err != nil {
			return err
		}
		got, err := tx.LastTimeline("w-1")
		if err != nil || got.Text != e.Text || got.Kind != "rebooted" || got.Count != 3 || !got.First.Equal(at) || !got.At.Equal(e.At) {
			t.Errorf("last line: got %+v, %v; want %+v", got, err, e)
		}
		n, err := tx.TrimTimeline("w-1", 4, "older lines were dropped")
		if err != nil || n != 6 {
			t.Errorf("trim: dropped %d (%v), want 6", n, err)
		}
		n, err = tx.TrimTimeline("w-1", 4, "older lines were dropped")
		if err != nil || n != 0 {
			t.Errorf("trim within the bound: dropped %d (%v), want 0", n, err)
		}
		return nil
	})
	if got, want := timelineTexts(t, s, "w-1"), []string{"older lines were dropped", "7", "8", "9 (×3)"}; !slices.Equal(got, want) {
		t.Errorf("trimmed timeline: got %q, want %q", got, want)
	}
	if got := timelineTexts(t, s, "w-2"); !slices.Equal(got, []string{"other"}) {
		t.Errorf("other workload's timeline: got %q", got)
	}
	view(t, s, func(tx store.Tx) error {
		for _, c := range []struct {
			keep, limit int
			want        []string
		}{{3, 10, []string{"w-1"}}, {0, 10, []string{"w-1", "w-2"}}, {0, 1, []string{"w-1"}}, {4, 10, nil}} {
			got, err := tx.LongTimelines(c.keep, c.limit)
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("LongTimelines(%d, %d): got %q (%v), want %q", c.keep, c.limit, got, err, c.want)
			}
		}
		return nil
	})
}

func testRemovedTimelines(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error {
		if err := tx.CreateTenant(store.Tenant{Name: "acme", Created: at}); err != nil {
			return err
		}
		if err := tx.CreateWorkload(store.Workload{ID: "kept", Tenant: "acme", State: store.StatePending, Created: at}); err != nil {
			return err
		}
		for _, e := range []store.TimelineEntry{
			{Workload: "kept", At: at, Text: "old but kept"},
			{Workload: "gone-old", At: at, Text: "a"},
			{Workload: "gone-old", At: at.Add(time.Hour), Text: "removed"},
			{Workload: "gone-new", At: at, Text: "a"},
			{Workload: "gone-new", At: at.Add(3 * time.Hour), Text: "removed"},
		} {
			if err := tx.AddTimeline(e); err != nil {
				return err
			}
		}
		n, err := tx.DeleteRemovedTimelines(at.Add(2 * time.Hour))
		if err != nil || n != 2 {
			t.Errorf("deleted %d lines (%v), want the 2 of gone-old", n, err)
		}
		return nil
	})
	for w, want := range map[string]int{"kept": 1, "gone-old": 0, "gone-new": 2} {
		if got := len(timelineTexts(t, s, w)); got != want {
			t.Errorf("%s: %d lines left, want %d", w, got, want)
		}
	}
}

func testCertificates(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error {
		for i, c := range []store.Certificate{
			{Serial: "0a", Machine: "m-1", Issued: at, Expires: at.Add(time.Hour)},
			{Serial: "0b", Machine: "m-1", Issued: at.Add(time.Minute), Expires: at.Add(2 * time.Hour)},
			{Serial: "0c", Machine: "m-1", Issued: at.Add(2 * time.Minute), Expires: at.Add(3 * time.Hour)},
			{Serial: "1a", Machine: "m-2", Issued: at, Expires: at.Add(time.Hour)},
		} {
			if err := tx.PutCertificate(c); err != nil {
				return fmt.Errorf("certificate %d: %w", i, err)
			}
		}
		c, err := tx.Certificate("0b")
		if err != nil {
			return err
		}
		c.Revoked = at.Add(5 * time.Minute)
		return tx.PutCertificate(c)
	})
	view(t, s, func(tx store.Tx) error {
		if _, err := tx.Certificate("ff"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown serial: got %v, want ErrNotFound", err)
		}
		cs, err := tx.Certificates("m-1")
		if err != nil || len(cs) != 3 || cs[0].Serial != "0a" || cs[1].Revoked.IsZero() || !cs[2].Expires.Equal(at.Add(3*time.Hour)) {
			t.Errorf("certificates of m-1: got %+v, %v", cs, err)
		}
		if cs[1].Live(at) || !cs[0].Live(at) || cs[0].Live(at.Add(time.Hour)) {
			t.Errorf("Live: a revoked or expired certificate counts as live")
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		// 0a expired; of 0b and 0c only the newest is kept.
		n, err := tx.PruneCertificates("m-1", at.Add(90*time.Minute), 1)
		if err != nil || n != 2 {
			t.Errorf("pruned %d (%v), want 2", n, err)
		}
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		one, _ := tx.Certificates("m-1")
		two, _ := tx.Certificates("m-2")
		if len(one) != 1 || one[0].Serial != "0c" || len(two) != 1 {
			t.Errorf("after pruning m-1: m-1 %+v, m-2 %+v", one, two)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutMachine(store.Machine{ID: "m-2"}); err != nil {
			return err
		}
		return tx.DeleteMachine("m-2")
	})
	view(t, s, func(tx store.Tx) error {
		if cs, _ := tx.Certificates("m-2"); len(cs) != 0 {
			t.Errorf("a removed machine keeps %d certificates", len(cs))
		}
		return nil
	})
}
