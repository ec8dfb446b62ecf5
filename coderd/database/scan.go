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
//
// A row of several structs (a workspace with its latest build and that
// build's job, an API key with its user) has one shape: each nested part
// is selected with prefixed ("b.id", "j.id"), splitRow divides the row by
// prefix, and each part is mapped onto the part's own struct, the one its
// table's other queries use, with collectOneBy or collectAllBy. A column
// of no part still fails the scan: the unprefixed rest is mapped too. A
// query of a single value scans it directly: it has no column to confuse.

// collectOne maps the first row of a query onto T by column name. It takes
// Query's results as they come, so that a call reads
// collectOne[T](db.q().Query(...)). No row is ErrNotFound; driver errors
// go through mapErr.
func collectOne[T any](rows pgx.Rows, err error) (T, error) {
	return collectOneBy(rows, err, pgx.RowToStructByName[T])
}

// collectAll maps every row of a query onto T by column name; an empty
// result is an empty, non-nil slice.
func collectAll[T any](rows pgx.Rows, err error) ([]T, error) {
	return collectAllBy(rows, err, pgx.RowToStructByName[T])
}

// collectOneBy is collectOne for a row that to maps (a row of several
// structs, divided with splitRow).
func collectOneBy[T any](rows pgx.Rows, err error, to pgx.RowToFunc[T]) (T, error) {
	if err != nil {
		var zero T
		return zero, mapErr(err)
	}
	v, err := pgx.CollectOneRow(rows, to)
	return v, mapErr(err)
}

// collectAllBy is collectAll for rows that to maps.
func collectAllBy[T any](rows pgx.Rows, err error, to pgx.RowToFunc[T]) ([]T, error) {
	if err != nil {
		return nil, mapErr(err)
	}
	list, err := pgx.CollectRows(rows, to)
	return list, mapErr(err)
}

// columnList splits a comma-separated column list (which may run over
// several lines).
func columnList(columns string) []string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = strings.TrimSpace(c)
	}
	return cols
}

// qualified prefixes each of a comma-separated column list with table
// ("u.id, u.email"); the columns keep their names in the result.
func qualified(table, columns string) string {
	cols := columnList(columns)
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
	cols := columnList(columns)
	for i, c := range cols {
		cols[i] = fmt.Sprintf(`%s.%s AS "%s.%s"`, table, c, table, c)
	}
	return strings.Join(cols, ", ")
}

// splitRow divides a row by column name: parts[i] shows the columns named
// prefixes[i]+name under name, and the last part the columns of none of
// the prefixes, each part to be mapped by name onto its own struct
// (pgx.RowToStructByName). All read the same row; a column goes to the
// first prefix it has.
func splitRow(row pgx.CollectableRow, prefixes ...string) []pgx.CollectableRow {
	parts := make([]*subRow, len(prefixes)+1)
	for i := range parts {
		parts[i] = &subRow{row: row}
	}
	for i, fd := range row.FieldDescriptions() {
		p := parts[len(prefixes)]
		for j, prefix := range prefixes {
			if name, ok := strings.CutPrefix(fd.Name, prefix); ok {
				p, fd.Name = parts[j], name
				break
			}
		}
		p.index, p.fields = append(p.index, i), append(p.fields, fd)
	}
	out := make([]pgx.CollectableRow, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
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
