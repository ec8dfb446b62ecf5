package database_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
)

// TestMigrateTemplatesStayUsableByEveryone upgrades a database written
// just before the groups migration and checks that a template that was
// there is still usable by everyone: its ACL gives the Everyone group
// (the organization's id) "use".
func TestMigrateTemplatesStayUsableByEveryone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names, err := filepath.Glob("migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var before []string
	for _, n := range names {
		if strings.HasSuffix(n, "_groups.sql") {
			break
		}
		before = append(before, filepath.Base(n))
	}
	if len(before) == len(names) {
		t.Fatal("no *_groups.sql migration")
	}
	url := coderdtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, name := range before {
		sql, err := os.ReadFile("migrations/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
		v, _ := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, v, name); err != nil {
			t.Fatal(err)
		}
	}
	org, user, file, job, version, tpl := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO organizations (id, name, display_name, is_default, created_at, updated_at) VALUES ($1, 'coder', 'Coder', true, now(), now())`, []any{org}},
		{`INSERT INTO users (id, email, username, hashed_password, created_at, updated_at, last_seen_at) VALUES ($1, 'a@example.com', 'a', '\x00', now(), now(), now())`, []any{user}},
		{`INSERT INTO files (id, hash, created_by, mimetype, data, created_at) VALUES ($1, 'h', $2, 'application/x-tar', '\x00', now())`, []any{file, user}},
		{`INSERT INTO provisioner_jobs (id, created_at, updated_at, organization_id, initiator_id, type, input, tags, file_id)
			VALUES ($1, now(), now(), $2, $3, 'template_version_import', '{}', '{}', $4)`, []any{job, org, user, file}},
		{`INSERT INTO template_versions (id, organization_id, name, job_id, created_by, created_at, updated_at) VALUES ($1, $2, 'v1', $3, $4, now(), now())`,
			[]any{version, org, job, user}},
		{`INSERT INTO templates (id, organization_id, name, active_version_id, created_by, created_at, updated_at) VALUES ($1, $2, 't', $3, $4, now(), now())`,
			[]any{tpl, org, version, user}},
	} {
		if _, err := conn.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("seed %q: %v", q.sql, err)
		}
	}
	db, err := database.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	acl, err := db.TemplateACLByID(ctx, tpl)
	if err != nil {
		t.Fatal(err)
	}
	if len(acl.Users) != 0 || len(acl.Groups) != 1 || acl.Groups[org] != "use" {
		t.Errorf("an existing template's ACL: got users %v groups %v, want the Everyone group (%s) on use", acl.Users, acl.Groups, org)
	}
}
