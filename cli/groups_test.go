package cli_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestCLIGroups: `coder groups create|edit|add|remove|list|delete`, list's
// JSON with its members, and a member refused.
func TestCLIGroups(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	alice, _ := d.CreateUser(t, owner, "alice")
	d.CreateUser(t, owner, "bob")
	d.CreateUser(t, owner, "carol")
	env := signedInEnv(t, owner)

	if got := mustRun(t, env, "groups", "create", "devs", "--display-name", "Developers"); got != "Successfully created group devs!\n" {
		t.Errorf("groups create: got %q", got)
	}
	if got := mustRun(t, env, "groups", "edit", "devs", "--add-users", "alice,bob,carol@example.com", "--rm-users", "bob"); got != "Successfully patched group devs!\n" {
		t.Errorf("groups edit: got %q", got)
	}
	if got := mustRun(t, env, "groups", "add", "devs", "bob"); got != "Group devs: alice,bob,carol\n" {
		t.Errorf("groups add: got %q", got)
	}
	if got := mustRun(t, env, "groups", "remove", "devs", "carol"); got != "Group devs: alice,bob\n" {
		t.Errorf("groups remove: got %q", got)
	}
	if got := mustRun(t, env, "groups", "list"); !rowHas(got, "devs", "alice,bob") || !rowHas(got, "Everyone", "admin,alice,bob,carol") {
		t.Errorf("groups list: got\n%s\nwant devs with alice,bob and Everyone with all", got)
	}
	var gs []codersdk.Group
	if err := json.Unmarshal([]byte(mustRun(t, env, "groups", "list", "-o", "json")), &gs); err != nil {
		t.Fatal(err)
	}
	var devs codersdk.Group
	for _, g := range gs {
		if g.Name == "devs" {
			devs = g
		}
	}
	var members []string
	for _, m := range devs.Members {
		members = append(members, m.Username+" "+m.Email)
	}
	if want := []string{"alice alice@example.com", "bob bob@example.com"}; !slices.Equal(members, want) || devs.DisplayName != "Developers" || devs.Source != "user" {
		t.Errorf("groups list -o json: devs is %+v, members %v; want Developers, source user, members %v", devs, members, want)
	}

	memberEnv := signedInEnv(t, alice)
	if got := mustRun(t, memberEnv, "groups", "list"); !rowHas(got, "devs", "alice,bob") || rowHas(got, "other", "") {
		t.Errorf("a member's groups list: got\n%s", got)
	}
	checkRefusals(t, []refusal{
		{"member creates", memberEnv, []string{"groups", "create", "mine"}, 1, "Forbidden"},
		{"unknown group", env, []string{"groups", "edit", "nope", "-a", "alice"}, 1, `Group "nope" not found`},
		{"unknown user", env, []string{"groups", "add", "devs", "nobody"}, 1, `no user "nobody"`},
		{"add without users", env, []string{"groups", "add", "devs"}, 2, "GROUP USER..."},
		{"Everyone", env, []string{"groups", "delete", "Everyone"}, 1, "cannot be deleted"},
	})
	if got := mustRun(t, env, "groups", "delete", "devs"); got != "Successfully deleted group devs!\n" {
		t.Errorf("groups delete: got %q", got)
	}
	if gs, err := owner.Groups(context.Background(), "default"); err != nil || len(gs) != 1 {
		t.Errorf("groups after delete: got %d (%v), want Everyone only", len(gs), err)
	}
}

// TestCLITemplatePermissions: `coder templates permissions` shows and
// changes a template's ACL.
func TestCLITemplatePermissions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk"})
	owner, _ := d.CreateFirstUser(t)
	d.CreateUser(t, owner, "alice")
	daemon := d.NewDaemon(t, "perm", nil)
	tpl := coderdtest.CreateTemplate(t, owner, daemon, "perm", coderdtest.MinimalTemplate, nil)
	if _, err := owner.CreateGroup(ctx, "default", codersdk.CreateGroupRequest{Name: "devs"}); err != nil {
		t.Fatal(err)
	}
	env := signedInEnv(t, owner)
	if got := mustRun(t, env, "templates", "permissions", "perm"); !rowHas(got, "group", "use") || !strings.Contains(got, "Everyone") {
		t.Errorf("templates permissions: got\n%s\nwant Everyone on use", got)
	}
	mustRun(t, env, "templates", "permissions", "perm", "--group", "Everyone=none", "--group", "devs=use", "--user", "alice=admin")
	var acl codersdk.TemplateACL
	if err := json.Unmarshal([]byte(mustRun(t, env, "templates", "permissions", "perm", "-o", "json")), &acl); err != nil {
		t.Fatal(err)
	}
	if len(acl.Groups) != 1 || acl.Groups[0].Name != "devs" || acl.Groups[0].Role != "use" || len(acl.Users) != 1 || acl.Users[0].Username != "alice" || acl.Users[0].Role != "admin" {
		t.Errorf("ACL after the change: got %+v", acl)
	}
	if _, stderr, code := run(t, env, "templates", "permissions", "perm", "--group", "devs=read"); code != 2 || !strings.Contains(stderr, "use, admin or none") {
		t.Errorf("a bad role: got exit %d, %q; want 2 naming the roles", code, stderr)
	}
	_ = tpl
}
