package database_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
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
	url, conn := oldSchemaDB(t, before)
	org, user, file, job, version, tpl := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	seed(t, conn, append(ownerRows(org, user, file),
		row{`INSERT INTO provisioner_jobs (id, created_at, updated_at, organization_id, initiator_id, type, input, tags, file_id)
			VALUES ($1, now(), now(), $2, $3, 'template_version_import', '{}', '{}', $4)`, []any{job, org, user, file}},
		row{`INSERT INTO template_versions (id, organization_id, name, job_id, created_by, created_at, updated_at) VALUES ($1, $2, 'v1', $3, $4, now(), now())`,
			[]any{version, org, job, user}},
		row{`INSERT INTO templates (id, organization_id, name, active_version_id, created_by, created_at, updated_at) VALUES ($1, $2, 't', $3, $4, now(), now())`,
			[]any{tpl, org, version, user}},
	)...)
	db := openMigrated(t, url)
	acl, err := db.TemplateACLByID(ctx, tpl)
	if err != nil {
		t.Fatal(err)
	}
	if len(acl.Users) != 0 || len(acl.Groups) != 1 || acl.Groups[org] != "use" {
		t.Errorf("an existing template's ACL: got users %v groups %v, want the Everyone group (%s) on use", acl.Users, acl.Groups, org)
	}
}
