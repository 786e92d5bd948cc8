package hub

import (
	"context"
	"crypto/rand"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

// BenchmarkEnroll enrols machines into a running hub (its controller
// passing as a served hub's does) that already holds 100 or 5,000 enrolled
// machines: the cost of one enrolment must not grow with the fleet.
//
//	go test ./hub -run '^$' -bench BenchmarkEnroll -benchtime 300x
func BenchmarkEnroll(b *testing.B) {
	for _, enrolled := range []int{100, 5000} {
		b.Run(fmt.Sprintf("enrolled=%d", enrolled), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			authority, err := ca.Open(ca.Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "hub.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			h, err := New(ctx, Config{Store: st, Clock: clock.Real{}, CA: authority, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			if err := h.CreateTenant(ctx, "acme"); err != nil {
				b.Fatal(err)
			}
			// One CSR serves every enrolment: signing it is the CA's cost,
			// the same at any N, and making keys is the agents'.
			_, csrPEM := newCSRPEM(b, pkix.Name{CommonName: "box"})
			csr, err := ca.ParseCSR(csrPEM)
			if err != nil {
				b.Fatal(err)
			}
			enrol := func(i int, tok protocol.Token) {
				if _, err := h.Enroll(ctx, &EnrollRequest{Token: tok, CSR: csr, MachineID: randomID(i), Name: "box"}); err != nil {
					b.Fatal(err)
				}
			}
			tokens := func(n int) []protocol.Token {
				out := make([]protocol.Token, n)
				for i := range out {
					out[i], _, err = h.CreateEnrollToken(ctx, "acme", "local", 0)
					if err != nil {
						b.Fatal(err)
					}
				}
				return out
			}
			for i, tok := range tokens(enrolled) {
				enrol(i, tok)
			}
			done := make(chan struct{})
			go func() { h.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			toks := tokens(b.N)
			cpu0 := processCPU()
			b.ResetTimer()
			for i := range b.N {
				enrol(enrolled+i, toks[i])
			}
			b.StopTimer()
			// The process's CPU, the controller's passes included: they run
			// beside the enrolments on another core and the wall time alone
			// would not show them.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// randomID is a machine ID as agents make them: random, so inserts land
// all over the machines' index rather than at its end.
func randomID(int) string {
	var raw [16]byte
	rand.Read(raw[:])
	return "m-" + hex.EncodeToString(raw[:])
}
