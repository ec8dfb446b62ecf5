package appliance

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"airgapcoder/certs"
)

// TestPostgresTrusting: a postgres-url that verifies the database's
// certificate without naming a CA gets the appliance's trust store, in
// either form PostgreSQL takes; any other is left as it is. pgx parses the
// result and loads the trust store from it.
func TestPostgresTrusting(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Generate(dir, []string{"localhost"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	trust := filepath.Join(certs.CertsDir(dir), certs.TrustFile)
	expand := strings.NewReplacer("TRUSTQ", url.QueryEscape(trust), "TRUST", trust).Replace
	for _, tc := range []struct{ in, want string }{
		{"postgres://coder:pw@db.example.internal:5432/coder?sslmode=verify-full",
			"postgres://coder:pw@db.example.internal:5432/coder?sslmode=verify-full&sslrootcert=TRUSTQ"},
		{"postgresql://db/coder?sslmode=verify-ca", "postgresql://db/coder?sslmode=verify-ca&sslrootcert=TRUSTQ"},
		{"postgres://db/coder?sslmode=verify-full&sslrootcert=TRUST", "postgres://db/coder?sslmode=verify-full&sslrootcert=TRUST"},
		{"postgres://db/coder?sslmode=require", "postgres://db/coder?sslmode=require"},
		{"postgres://db/coder", "postgres://db/coder"},
		{"host=db dbname=coder sslmode=verify-full", "host=db dbname=coder sslmode=verify-full sslrootcert='TRUST'"},
		{"host=db sslmode='verify-ca' sslrootcert=TRUST", "host=db sslmode='verify-ca' sslrootcert=TRUST"},
		{"host=db sslmode=disable", "host=db sslmode=disable"},
	} {
		in, want := expand(tc.in), expand(tc.want)
		got, err := postgresTrusting(in, trust)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", in, got, want)
		}
		if _, err := pgconn.ParseConfig(got); err != nil {
			t.Errorf("%s: pgx cannot use it: %v", got, err)
		}
	}
	if _, err := postgresTrusting("postgres://%zz", trust); err == nil {
		t.Error("a malformed URL: no error")
	}
}
