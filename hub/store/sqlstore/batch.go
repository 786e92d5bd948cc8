package sqlstore

import (
	"strings"
)

// Writes of many rows name their rows in VALUES, each value cast to its
// column's type: PostgreSQL types a parameter by where it stands, and in
// VALUES it stands nowhere typed.

// workloadTypes are the types of workloadCols, in order.
var workloadTypes = []string{"TEXT", "TEXT", "TEXT", "TEXT", "TEXT", "TEXT", "TEXT", "TEXT", "TEXT",
	"TEXT", "TEXT", "BIGINT", "BIGINT", "TEXT", "BIGINT", "BIGINT", "BIGINT", "TEXT", "BIGINT"}

// putWorkloadsQueries and bumpMachinesQueries are, by the number of rows
// they write (1, 2, 4, … rowsPerStatement), the statements of
// PutWorkloads and BumpMachines.
var putWorkloadsQueries, bumpMachinesQueries = func() (map[int]string, map[int]string) {
	cols := strings.Split(strings.Join(strings.Fields(workloadCols), ""), ",")
	var set []string
	for _, c := range cols[1:] {
		set = append(set, c+" = v."+c)
	}
	put, bump := map[int]string{}, map[int]string{}
	for n := 1; n <= rowsPerStatement; n *= 2 {
		put[n] = `WITH v (` + strings.Join(cols, ", ") + `) AS (VALUES ` + valueRows(workloadTypes, n) + `)
		UPDATE workloads SET ` + strings.Join(set, ", ") + ` FROM v WHERE workloads.id = v.id`
		// v's columns are named apart from the machine's, so that
		// RETURNING names only the machine's in either dialect.
		bump[n] = `WITH v (bumped, by_count) AS (VALUES ` + valueRows([]string{"TEXT", "BIGINT"}, n) + `)
		UPDATE machines SET generation = generation + v.by_count FROM v WHERE machines.id = v.bumped RETURNING ` + machineCols
	}
	return put, bump
}()

// valueRows is n rows of VALUES, one cast parameter for each of types.
func valueRows(types []string, n int) string {
	vals := make([]string, len(types))
	for i, t := range types {
		vals[i] = "CAST(? AS " + t + ")"
	}
	row := "(" + strings.Join(vals, ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}
