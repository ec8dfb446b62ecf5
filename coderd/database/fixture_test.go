package database_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

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
	return openMigrated(t, coderdtest.NewDatabase(t))
}

// openMigrated opens the database at url and migrates it to the current
// schema; it is closed at cleanup.
func openMigrated(t *testing.T, url string) *database.DB {
	t.Helper()
	ctx := context.Background()
	db, err := database.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := db.Migrate(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db
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

// listen runs a pubsub on url, subscribed to channel, until the test ends,
// and returns the payloads it hears (not the "" of a (re)connection). It
// returns once the pubsub listens.
func listen(t *testing.T, url, channel string) <-chan string {
	t.Helper()
	ps := database.NewPubsub(url, slog.New(slog.DiscardHandler), channel)
	heard := make(chan string, 64)
	ps.Subscribe(channel, func(p string) {
		if p != "" {
			heard <- p
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ps.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ps.Ready():
	case <-time.After(15 * time.Second):
		t.Fatalf("the pubsub on %s did not listen within 15s", channel)
	}
	return heard
}
