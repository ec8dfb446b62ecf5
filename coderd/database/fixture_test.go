package database_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
)

// The fixtures the package's tests share: a database of their own at the
// current schema or at an old one, and rows seeded by hand where a test
// needs them without the queries that own them.

// openQueryDB returns a migrated database of its own.
func openQueryDB(t *testing.T) *database.DB {
	t.Helper()
	return coderdtest.OpenDatabase(t, coderdtest.NewDatabase(t))
}

// must fails the test on err.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// oldSchemaDB returns a database of its own at the schema the migration
// files names (from migrations/, in order) make, recorded in
// schema_migrations as Migrate records them, so that Migrate goes on from
// there; and a connection to it, closed at cleanup.
func oldSchemaDB(t *testing.T, names []string) (url string, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url = coderdtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	if _, err := conn.Exec(ctx, `CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		sql, err := os.ReadFile("migrations/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			t.Fatalf("migration %s: no version number: %v", name, err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, v, name); err != nil {
			t.Fatal(err)
		}
	}
	return url, conn
}

// row is one statement that seeds a table by hand.
type row struct {
	sql  string
	args []any
}

// execer is what seed needs of a connection or a pool.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// seed runs rows in order, failing the test at the first that fails.
func seed(t *testing.T, db execer, rows ...row) {
	t.Helper()
	for _, r := range rows {
		if _, err := db.Exec(context.Background(), r.sql, r.args...); err != nil {
			t.Fatalf("seed %q: %v", r.sql, err)
		}
	}
}

// ownerRows seeds the default organization org, the user alice (id user)
// and a file of hers (id file): what every workspace-side row refers to,
// in every schema version.
func ownerRows(org, user, file string) []row {
	return []row{
		{`INSERT INTO organizations (id, name, display_name, is_default, created_at, updated_at) VALUES ($1, 'coder', 'Coder', true, now(), now())`, []any{org}},
		{`INSERT INTO users (id, email, username, hashed_password, created_at, updated_at, last_seen_at) VALUES ($1, 'alice@example.com', 'alice', '\x00', now(), now(), now())`, []any{user}},
		{`INSERT INTO files (id, hash, created_by, mimetype, data, created_at) VALUES ($1, 'h', $2, 'application/x-tar', '\x00', now())`, []any{file, user}},
	}
}

// seededTemplate is the ids of the rows templateRows seeds, fresh for each
// test.
type seededTemplate struct {
	org, user, file, job, version, tpl string
}

func newSeededTemplate() seededTemplate {
	return seededTemplate{org: uuid.NewString(), user: uuid.NewString(), file: uuid.NewString(),
		job: uuid.NewString(), version: uuid.NewString(), tpl: uuid.NewString()}
}

// templateRows seeds ownerRows, a provisioner job of jobType, the version
// v1 it made and the template t whose active version that is: a template
// as every schema version has it, for a migration to find.
func templateRows(s seededTemplate, jobType string) []row {
	return append(ownerRows(s.org, s.user, s.file),
		row{`INSERT INTO provisioner_jobs (id, created_at, updated_at, organization_id, initiator_id, type, input, tags, file_id)
			VALUES ($1, now(), now(), $2, $3, $4, '{}', '{}', $5)`, []any{s.job, s.org, s.user, jobType, s.file}},
		row{`INSERT INTO template_versions (id, organization_id, name, job_id, created_by, created_at, updated_at) VALUES ($1, $2, 'v1', $3, $4, now(), now())`,
			[]any{s.version, s.org, s.job, s.user}},
		row{`INSERT INTO templates (id, organization_id, name, active_version_id, created_by, created_at, updated_at) VALUES ($1, $2, 't', $3, $4, now(), now())`,
			[]any{s.tpl, s.org, s.version, s.user}},
	)
}

// listen runs a pubsub on url, subscribed to channel, until the test ends,
// and returns the payloads it hears (not the "" of a (re)connection). It
// returns once the pubsub listens.
func listen(t *testing.T, url, channel string) <-chan string {
	t.Helper()
	heard := make(chan string, 64)
	coderdtest.RunPubsub(t, url, channel).Subscribe(channel, func(p string) {
		if p != "" {
			heard <- p
		}
	})
	return heard
}
