package coderd_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testidp"
)

// freshBrowser is a browser with no cookies, trusting what e.browser does.
func (e *oidcEnv) freshBrowser(t *testing.T) *http.Client {
	t.Helper()
	return newBrowser(t, e.browser.Transport.(*http.Transport).TLSClientConfig.RootCAs)
}

// signInClient signs in as username in a fresh browser, fails the test
// unless it lands on the workspaces page, and returns the session's client.
func (e *oidcEnv) signInClient(t *testing.T, username string) *codersdk.Client {
	t.Helper()
	b := e.freshBrowser(t)
	if status, u, body := e.signIn(t, b, username, ""); status != http.StatusOK || u.Path != "/workspaces" {
		t.Fatalf("sign in as %s: got %d at %s, want the workspaces page: %s", username, status, u, body)
	}
	return e.sessionClient(t, b)
}

// auditFields returns the additional fields of the audit records query
// finds.
func auditFields(t *testing.T, owner *codersdk.Client, query string) []map[string]any {
	t.Helper()
	logs, err := owner.AuditLogs(context.Background(), codersdk.AuditLogsRequest{SearchQuery: query, Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range logs.AuditLogs {
		f := map[string]any{}
		_ = json.Unmarshal(l.AdditionalFields, &f)
		out = append(out, f)
	}
	return out
}

// devsOnlyTemplate is the scene of the group sync tests: the deployment's
// owner, a provisioner daemon, and a template that only the group devs (made
// here, empty) may use; createWorkspace is a user trying to create a
// workspace of it.
func devsOnlyTemplate(t *testing.T, d *coderdtest.Deployment) (owner *codersdk.Client, daemon *coderdtest.Daemon, createWorkspace func(c *codersdk.Client, name string) error) {
	t.Helper()
	ctx := context.Background()
	owner, _ = d.CreateFirstUser(t)
	daemon = d.NewDaemon(t, "oidc", nil)
	tpl := coderdtest.CreateTemplate(t, owner, daemon, "devs-only", coderdtest.MinimalTemplate, nil)
	if _, err := owner.CreateGroup(ctx, "default", codersdk.CreateGroupRequest{Name: "devs"}); err != nil {
		t.Fatal(err)
	}
	if err := owner.UpdateTemplateACL(ctx, tpl.ID, codersdk.UpdateTemplateACL{GroupPerms: map[string]codersdk.TemplateRole{"Everyone": "", "devs": "use"}}); err != nil {
		t.Fatal(err)
	}
	return owner, daemon, func(c *codersdk.Client, name string) error {
		_, err := c.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: name})
		return err
	}
}

// checkGroupSyncAudit checks the audit log of a group sync test: the sign-in
// of the IdP subject refusedSub refused as not in an allowed group, and group
// changes by the sync that added the IdP subject syncedSub and removed it.
func checkGroupSyncAudit(t *testing.T, owner *codersdk.Client, refusedSub, syncedSub string) {
	t.Helper()
	var refused, added, removed bool
	for _, f := range auditFields(t, owner, "action:login") {
		if f["subject"] == refusedSub && f["refused"] == "not_in_allowed_group" {
			refused = true
		}
	}
	for _, f := range auditFields(t, owner, "resource_type:group") {
		if f["source"] != "oidc_group_sync" || f["idp_subject"] != syncedSub {
			continue
		}
		added = added || f["added_users"] != nil
		removed = removed || f["removed_users"] != nil
	}
	if !refused || !added || !removed {
		t.Errorf("audit: got the refusal of %s %v, %s added %v, removed %v; want all, with the IdP's subjects", refusedSub, refused, syncedSub, added, removed)
	}
}

func TestOIDCGroupSyncTemplateAccess(t *testing.T) {
	e := newOIDCEnv(t, oidcEnvOptions{provisionerPSK: "psk", config: func(c *coderd.OIDCConfig) {
		c.GroupField = "groups"
		gs, err := coderd.ParseGroupSyncOptions(`{"idp-devs": "devs"}`, false, "", []string{"devs", "idp-ops"}) // allowed groups are named after the mapping, as in Coder
		if err != nil {
			t.Fatal(err)
		}
		c.GroupSync = gs
	}})
	ctx := context.Background()
	owner, daemon, createWorkspace := devsOnlyTemplate(t, e.d)
	e.idp.AddUser(testidp.User{Username: "dana", Subject: "sub-dana", Email: "dana@corp.example", EmailVerified: true, Groups: []string{"idp-devs", "unknown-group"}})
	e.idp.AddUser(testidp.User{Username: "olaf", Email: "olaf@corp.example", EmailVerified: true, Groups: []string{"idp-ops"}})
	e.idp.AddUser(testidp.User{Username: "zed", Subject: "sub-zed", Email: "zed@corp.example", EmailVerified: true, Groups: []string{"contractors"}})
	e.idp.AddUser(testidp.User{Username: "nog", Email: "nog@corp.example", EmailVerified: true})

	dana := e.signInClient(t, "dana")
	devs, err := owner.GroupByName(ctx, "default", "devs")
	if err != nil {
		t.Fatal(err)
	}
	if got := memberNames(devs); !slices.Equal(got, []string{"dana"}) {
		t.Errorf("devs after dana's sign-in: got members %v, want [dana] (idp-devs maps to devs)", got)
	}
	groups, err := owner.Groups(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if names := groupNames(groups); slices.Contains(names, "unknown-group") {
		t.Errorf("groups: got %v; without --oidc-group-auto-create no group is made", names)
	}
	if err := createWorkspace(dana, "dana-ws"); err != nil {
		t.Fatalf("dana, in devs through the IdP, creating a workspace: %v", err)
	}
	daemon.RunOne(t)

	olaf := e.signInClient(t, "olaf")
	if err := createWorkspace(olaf, "olaf-ws"); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("olaf, not in devs, creating a workspace: got %v, want 403", err)
	}

	for _, u := range []string{"zed", "nog"} {
		status, url, body := e.signIn(t, e.freshBrowser(t), u, "")
		if status != http.StatusForbidden || url.Path != codersdk.OIDCCallbackPath || !strings.Contains(body, "not in an allowed group") {
			t.Errorf("%s, outside the allowed groups: got %d at %s: %s\nwant 403 saying not in an allowed group", u, status, url, body)
		}
	}
	if _, err := owner.User(ctx, "zed"); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("a refused sign-in made the user zed: got %v, want 404", err)
	}

	// The IdP drops dana from idp-devs: her next sign-in takes her out of
	// devs, and the template with it.
	e.idp.AddUser(testidp.User{Username: "dana", Subject: "sub-dana", Email: "dana@corp.example", EmailVerified: true, Groups: []string{"idp-ops"}})
	dana = e.signInClient(t, "dana")
	if devs, err = owner.GroupByName(ctx, "default", "devs"); err != nil || len(devs.Members) != 0 {
		t.Errorf("devs after dana left idp-devs: got %v, %v; want no members", memberNames(devs), err)
	}
	if err := createWorkspace(dana, "dana-ws2"); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("dana, out of devs, creating a workspace: got %v, want 403", err)
	}

	checkGroupSyncAudit(t, owner, "sub-zed", "sub-dana")
}

func TestOIDCGroupAutoCreateAndRoleSync(t *testing.T) {
	e := newOIDCEnv(t, oidcEnvOptions{config: func(c *coderd.OIDCConfig) {
		c.GroupField = "groups"
		gs, err := coderd.ParseGroupSyncOptions("", true, "^team-", nil)
		if err != nil {
			t.Fatal(err)
		}
		c.GroupSync = gs
		c.UserRoleField = "roles"
		if c.UserRoleMapping, err = coderd.ParseUserRoleMapping(`{"idp-template-admins": ["template-admin"], "idp-staff": []}`); err != nil {
			t.Fatal(err)
		}
	}})
	ctx := context.Background()
	owner, _ := e.d.CreateFirstUser(t)

	t.Run("auto create", func(t *testing.T) {
		e.idp.AddUser(testidp.User{Username: "ann", Email: "ann@corp.example", EmailVerified: true, Groups: []string{"team-a", "other"}})
		e.signInClient(t, "ann")
		g, err := owner.GroupByName(ctx, "default", "team-a")
		if err != nil {
			t.Fatalf("team-a was not created: %v", err)
		}
		if g.Source != codersdk.GroupSourceOIDC || !slices.Equal(memberNames(g), []string{"ann"}) {
			t.Errorf("team-a: got source %q, members %v; want oidc, [ann]", g.Source, memberNames(g))
		}
		if _, err := owner.GroupByName(ctx, "default", "other"); !codersdk.IsStatus(err, http.StatusNotFound) {
			t.Errorf("group other, which the regex filter leaves out: got %v, want 404", err)
		}
	})

	t.Run("role mapping", func(t *testing.T) {
		e.idp.AddUser(testidp.User{Username: "tess", Subject: "sub-tess", Email: "tess@corp.example", EmailVerified: true, Roles: []string{"idp-template-admins", "idp-staff", "auditor"}})
		me, err := e.signInClient(t, "tess").User(ctx, codersdk.Me)
		if err != nil {
			t.Fatal(err)
		}
		if !me.HasRole(codersdk.RoleTemplateAdmin) || me.HasRole(codersdk.RoleOwner) {
			t.Fatalf("tess's roles: got %+v, want template-admin", me.Roles)
		}
		// The claim loses the role: the next sign-in demotes her.
		e.idp.AddUser(testidp.User{Username: "tess", Subject: "sub-tess", Email: "tess@corp.example", EmailVerified: true})
		if me, err = e.signInClient(t, "tess").User(ctx, codersdk.Me); err != nil {
			t.Fatal(err)
		}
		if me.HasRole(codersdk.RoleTemplateAdmin) || len(me.Roles) != 0 {
			t.Errorf("tess's roles after the claim lost the role: got %+v, want member only", me.Roles)
		}
		var promoted, demoted bool
		for _, f := range auditFields(t, owner, "resource_type:user action:write") {
			if f["source"] != "oidc_role_sync" || f["idp_subject"] != "sub-tess" {
				continue
			}
			roles, _ := f["roles"].([]any)
			promoted = promoted || slices.Contains(roles, any(codersdk.RoleTemplateAdmin))
			demoted = demoted || len(roles) == 0
		}
		if !promoted || !demoted {
			t.Errorf("role sync audit: got promoted %v, demoted %v; want both with the IdP subject", promoted, demoted)
		}
	})

	t.Run("last owner kept", func(t *testing.T) {
		// The first user, an owner by password, signs in through the IdP
		// (linked by verified email) with no role claim: the sync would
		// make the only owner a member, and keeps the owner role instead.
		e.idp.AddUser(testidp.User{Username: "admin-idp", Subject: "sub-admin", Email: "admin@example.com", EmailVerified: true})
		me, err := e.signInClient(t, "admin-idp").User(ctx, codersdk.Me)
		if err != nil {
			t.Fatal(err)
		}
		if me.Username != "admin" || !me.HasRole(codersdk.RoleOwner) {
			t.Errorf("the last owner after a role sync: got %s %+v, want admin still owner", me.Username, me.Roles)
		}
		// With another owner, the sync demotes it.
		if _, err := owner.UpdateUserRoles(ctx, "tess", []string{codersdk.RoleOwner}); err != nil {
			t.Fatal(err)
		}
		if me, err = e.signInClient(t, "admin-idp").User(ctx, codersdk.Me); err != nil {
			t.Fatal(err)
		}
		if me.HasRole(codersdk.RoleOwner) {
			t.Errorf("an owner whose claim grants nothing, with another owner: got %+v, want member", me.Roles)
		}
	})
}
