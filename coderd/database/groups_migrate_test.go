package database_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
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
	ids := newSeededTemplate()
	seed(t, conn, templateRows(ids, "template_version_import")...)
	db := coderdtest.OpenDatabase(t, url)
	acl, err := db.TemplateACLByID(ctx, ids.tpl)
	if err != nil {
		t.Fatal(err)
	}
	if len(acl.Users) != 0 || len(acl.Groups) != 1 || acl.Groups[ids.org] != "use" {
		t.Errorf("an existing template's ACL: got users %v groups %v, want the Everyone group (%s) on use", acl.Users, acl.Groups, ids.org)
	}
}
