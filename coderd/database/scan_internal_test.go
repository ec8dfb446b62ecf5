package database

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fakeRow is a row of text columns, as pgx.CollectableRow.
type fakeRow struct {
	names  []string
	values []string
}

func (r fakeRow) FieldDescriptions() []pgconn.FieldDescription {
	fds := make([]pgconn.FieldDescription, len(r.names))
	for i, n := range r.names {
		fds[i].Name = n
	}
	return fds
}

func (r fakeRow) Scan(dest ...any) error {
	if len(dest) != len(r.values) {
		return fmt.Errorf("scan %d columns into %d destinations", len(r.values), len(dest))
	}
	for i, d := range dest {
		if d != nil {
			reflect.ValueOf(d).Elem().SetString(r.values[i])
		}
	}
	return nil
}

func (r fakeRow) Values() ([]any, error) {
	out := make([]any, len(r.values))
	for i, v := range r.values {
		out[i] = v
	}
	return out, nil
}

func (r fakeRow) RawValues() [][]byte {
	out := make([][]byte, len(r.values))
	for i, v := range r.values {
		out[i] = []byte(v)
	}
	return out
}

// TestSplitRow: a row of a workspace-like join divides by prefix into
// parts that map onto their own structs, and a column that no part's
// struct has still fails the scan.
func TestSplitRow(t *testing.T) {
	type owner struct {
		ID    string `db:"id"`
		Email string `db:"email"`
	}
	type job struct {
		ID string `db:"id"`
	}
	type thing struct {
		ID   string `db:"id"`
		Name string `db:"name"`
	}
	row := fakeRow{
		names:  []string{"id", "u.id", "name", "j.id", "u.email"},
		values: []string{"t1", "u1", "box", "j1", "a@example.com"},
	}
	parts := splitRow(row, "u.", "j.")
	if len(parts) != 3 {
		t.Fatalf("got %d parts, want 3", len(parts))
	}
	u, err := pgx.RowToStructByName[owner](parts[0])
	if err != nil || u != (owner{"u1", "a@example.com"}) {
		t.Errorf("u. part: got %+v, %v; want {u1 a@example.com}", u, err)
	}
	j, err := pgx.RowToStructByName[job](parts[1])
	if err != nil || j != (job{"j1"}) {
		t.Errorf("j. part: got %+v, %v; want {j1}", j, err)
	}
	th, err := pgx.RowToStructByName[thing](parts[2])
	if err != nil || th != (thing{"t1", "box"}) {
		t.Errorf("rest: got %+v, %v; want {t1 box}", th, err)
	}

	// A column of the rest without a field ("name") fails, as in a query
	// of one struct.
	if _, err := pgx.RowToStructByName[job](parts[2]); err == nil {
		t.Error("rest mapped onto a struct without a name field: got no error, want one")
	}
	// rowToBuildOnly maps the rest onto struct{}: any column fails.
	if _, err := pgx.RowToStructByName[struct{}](parts[2]); err == nil {
		t.Error("rest mapped onto struct{}: got no error, want one")
	}
	if _, err := pgx.RowToStructByName[struct{}](splitRow(fakeRow{names: []string{"j.id"}, values: []string{"j1"}}, "j.")[1]); err != nil {
		t.Errorf("empty rest mapped onto struct{}: %v", err)
	}
}

// TestColumnList: a column list may run over lines.
func TestColumnList(t *testing.T) {
	got := prefixed("j", "id, error,\n\ttype")
	want := `j.id AS "j.id", j.error AS "j.error", j.type AS "j.type"`
	if got != want {
		t.Errorf("prefixed: got %q, want %q", got, want)
	}
}
