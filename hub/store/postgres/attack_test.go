package postgres

import (
	"testing"

	"einsora.dev/edge/hub/attacktest"
	"einsora.dev/edge/hub/store"
)

// The attacks of issue 14 on PostgreSQL.
func TestAttacks(t *testing.T) {
	attacktest.Run(t, func(t *testing.T) store.Store { return open(t, testDSN(t)) })
}
