package postgres

import (
	"os"
	"testing"

	"einsora.dev/edge/internal/pgtest"
)

// The tests run against a real PostgreSQL that internal/pgtest provides
// (EINSORA_TEST_POSTGRES, or a throwaway server it starts, or a skip
// unless EINSORA_REQUIRE_POSTGRES=1).

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// testDSN returns a DSN whose search_path is a new, empty schema that is
// dropped when t ends: a fresh database as far as the store can tell.
func testDSN(t testing.TB) string {
	t.Helper()
	return pgtest.Schema(t)
}
