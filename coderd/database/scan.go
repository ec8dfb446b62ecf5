package database

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Rows are mapped onto structs by column name (pgx's RowToStructByName):
// every selected column needs a field with its name (a `db:"column"` tag)
// and every field a column, or the scan fails. A query and its struct
// cannot drift apart unnoticed: the first test that runs the query fails.
// Nested values (a workspace's latest build, a build's job) are selected
// under prefixed aliases into flat row structs that embed the parts; the
// parts of a join whose tables share column names (an API key and its
// user) can instead be selected with prefixed and mapped one by one
// through splitRow. A query of a single value scans it directly: it has no
// column to confuse.

// collectOne maps the first row of a query onto T by column name. It takes
// Query's results as they come, so that a call reads
// collectOne[T](db.q().Query(...)). No row is ErrNotFound; driver errors
// go through mapErr.
func collectOne[T any](rows pgx.Rows, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, mapErr(err)
	}
	v, err := pgx.CollectOneRow(rows, pgx.RowToStructByName[T])
	return v, mapErr(err)
}

// collectAll maps every row of a query onto T by column name; an empty
// result is an empty, non-nil slice.
func collectAll[T any](rows pgx.Rows, err error) ([]T, error) {
	if err != nil {
		return nil, mapErr(err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[T])
	return list, mapErr(err)
}

// qualified prefixes each of a comma-separated column list with table
// ("u.id, u.email"); the columns keep their names in the result.
func qualified(table, columns string) string {
	cols := strings.Split(columns, ", ")
	for i, c := range cols {
		cols[i] = table + "." + c
	}
	return strings.Join(cols, ", ")
}

// prefixed selects each of a comma-separated column list of table under
// the alias "table.column" (u.id AS "u.id"), so that the columns of two
// tables of a join that share names stay apart; splitRow takes them out
// again.
func prefixed(table, columns string) string {
	cols := strings.Split(columns, ", ")
	for i, c := range cols {
		cols[i] = fmt.Sprintf(`%s.%s AS "%s.%s"`, table, c, table, c)
	}
	return strings.Join(cols, ", ")
}

// splitRow divides a row by column name: part shows the columns named
// prefix+name under name, rest the others, each to be mapped by name onto
// its own struct (pgx.RowToStructByName). Both read the same row.
func splitRow(row pgx.CollectableRow, prefix string) (part, rest pgx.CollectableRow) {
	p := &subRow{row: row}
	r := &subRow{row: row}
	for i, fd := range row.FieldDescriptions() {
		if name, ok := strings.CutPrefix(fd.Name, prefix); ok {
			fd.Name = name
			p.index, p.fields = append(p.index, i), append(p.fields, fd)
		} else {
			r.index, r.fields = append(r.index, i), append(r.fields, fd)
		}
	}
	return p, r
}

// subRow is some of a row's columns (splitRow).
type subRow struct {
	row    pgx.CollectableRow
	index  []int // positions of the columns in row
	fields []pgconn.FieldDescription
}

// FieldDescriptions describes the sub-row's columns, under their names
// without the prefix.
func (s *subRow) FieldDescriptions() []pgconn.FieldDescription { return s.fields }

// Scan scans the sub-row's columns into dest, skipping the row's others.
func (s *subRow) Scan(dest ...any) error {
	if len(dest) != len(s.index) {
		return fmt.Errorf("scan %d columns into %d destinations", len(s.index), len(dest))
	}
	all := make([]any, len(s.row.FieldDescriptions())) // nil skips a column
	for i, d := range dest {
		all[s.index[i]] = d
	}
	return s.row.Scan(all...)
}

// Values returns the sub-row's columns' values.
func (s *subRow) Values() ([]any, error) {
	all, err := s.row.Values()
	if err != nil {
		return nil, err
	}
	out := make([]any, len(s.index))
	for i, j := range s.index {
		out[i] = all[j]
	}
	return out, nil
}

// RawValues returns the sub-row's columns' undecoded values.
func (s *subRow) RawValues() [][]byte {
	all := s.row.RawValues()
	out := make([][]byte, len(s.index))
	for i, j := range s.index {
		out[i] = all[j]
	}
	return out
}
