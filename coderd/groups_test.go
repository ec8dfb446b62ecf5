package coderd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

func memberNames(g codersdk.Group) []string {
	out := []string{}
	for _, m := range g.Members {
		out = append(out, m.Username)
	}
	return out
}

func groupNames(gs []codersdk.Group) []string {
	out := []string{}
	for _, g := range gs {
		out = append(out, g.Name)
	}
	return out
}

func TestGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	alice, aliceUser := d.CreateUser(t, owner, "alice")
	bob, _ := d.CreateUser(t, owner, "bob")
	tadmin, _ := d.CreateUser(t, owner, "tadmin", codersdk.RoleTemplateAdmin)
	org, err := owner.Organization(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}

	// Only owners create groups.
	for name, c := range map[string]*codersdk.Client{"member": alice, "template admin": tadmin} {
		if _, err := c.CreateGroup(ctx, "default", codersdk.CreateGroupRequest{Name: "nope"}); !codersdk.IsStatus(err, http.StatusForbidden) {
			t.Errorf("%s creating a group: got %v, want 403", name, err)
		}
	}
	devs, err := owner.CreateGroup(ctx, "default", codersdk.CreateGroupRequest{Name: "devs", DisplayName: "Developers"})
	if err != nil {
		t.Fatal(err)
	}
	if devs.Source != codersdk.GroupSourceUser || devs.OrganizationID != org.ID || len(devs.Members) != 0 {
		t.Errorf("new group: got %+v, want source user, org %s, no members", devs, org.ID)
	}
	// The organization's id names it too, as in Coder.
	if _, err := owner.CreateGroup(ctx, org.ID, codersdk.CreateGroupRequest{Name: "ops"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		status int
	}{
		{"DEVS", http.StatusConflict},
		{"everyone", http.StatusConflict},
		{"bad name!", http.StatusBadRequest},
		{"", http.StatusBadRequest},
	} {
		if _, err := owner.CreateGroup(ctx, "default", codersdk.CreateGroupRequest{Name: tc.name}); !codersdk.IsStatus(err, tc.status) {
			t.Errorf("create group %q: got %v, want %d", tc.name, err, tc.status)
		}
	}

	// Membership: by username, id or email.
	devs, err = owner.PatchGroup(ctx, devs.ID, codersdk.PatchGroupRequest{AddUsers: []string{"alice", "bob@example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := memberNames(devs), []string{"alice", "bob"}; !slices.Equal(got, want) {
		t.Errorf("members after add: got %v, want %v", got, want)
	}
	devs, err = owner.PatchGroup(ctx, devs.ID, codersdk.PatchGroupRequest{RemoveUsers: []string{"bob"}, Name: "developers"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := memberNames(devs), []string{"alice"}; !slices.Equal(got, want) || devs.Name != "developers" {
		t.Errorf("after remove and rename: got %s %v, want developers %v", devs.Name, got, want)
	}
	if _, err := owner.PatchGroup(ctx, devs.ID, codersdk.PatchGroupRequest{AddUsers: []string{"nobody"}}); !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("adding an unknown user: got %v, want 400", err)
	}
	if _, err := alice.PatchGroup(ctx, devs.ID, codersdk.PatchGroupRequest{AddUsers: []string{"bob"}}); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("a member editing its group: got %v, want 403", err)
	}

	// Everyone: the organization's id, every user, not editable.
	all, err := owner.Groups(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := groupNames(all), []string{"Everyone", "developers", "ops"}; !slices.Equal(got, want) {
		t.Fatalf("owner's groups: got %v, want %v", got, want)
	}
	everyone := all[0]
	if everyone.ID != org.ID || !everyone.IsEveryone() {
		t.Errorf("Everyone's id: got %s, want the organization's %s", everyone.ID, org.ID)
	}
	if got, want := memberNames(everyone), []string{"admin", "alice", "bob", "tadmin"}; !slices.Equal(got, want) {
		t.Errorf("Everyone's members: got %v, want %v", got, want)
	}
	if _, err := owner.PatchGroup(ctx, everyone.ID, codersdk.PatchGroupRequest{AddUsers: []string{"alice"}}); !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("editing Everyone: got %v, want 400", err)
	}
	if err := owner.DeleteGroup(ctx, everyone.ID); !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("deleting Everyone: got %v, want 400", err)
	}

	// Members read the groups they are in; template admins read all.
	for _, tc := range []struct {
		who  string
		c    *codersdk.Client
		want []string
	}{
		{"alice", alice, []string{"Everyone", "developers"}},
		{"bob", bob, []string{"Everyone"}},
		{"tadmin", tadmin, []string{"Everyone", "developers", "ops"}},
	} {
		gs, err := tc.c.Groups(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		if got := groupNames(gs); !slices.Equal(got, tc.want) {
			t.Errorf("%s's groups: got %v, want %v", tc.who, got, tc.want)
		}
	}
	if g, err := alice.Group(ctx, devs.ID); err != nil || g.Name != "developers" {
		t.Errorf("alice reading her group: got %v %v", g.Name, err)
	}
	if _, err := bob.Group(ctx, devs.ID); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("bob reading a group he is not in: got %v, want 404", err)
	}
	if g, err := alice.GroupByName(ctx, "default", "DEVELOPERS"); err != nil || g.ID != devs.ID {
		t.Errorf("group by name: got %v %v, want %s", g.ID, err, devs.ID)
	}

	// Deleting.
	if err := alice.DeleteGroup(ctx, devs.ID); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("a member deleting a group: got %v, want 403", err)
	}
	if err := owner.DeleteGroup(ctx, devs.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Group(ctx, devs.ID); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("a deleted group: got %v, want 404", err)
	}

	// Every change is audited, refusals included.
	logs, err := owner.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "resource_type:group", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		action codersdk.AuditAction
		target string
		status int
	}
	var got []rec
	var addedFields map[string]any
	for _, l := range logs.AuditLogs {
		got = append(got, rec{l.Action, l.ResourceTarget, l.StatusCode})
		if l.Action == codersdk.AuditActionWrite && l.StatusCode == 200 && addedFields == nil {
			_ = json.Unmarshal(l.AdditionalFields, &addedFields)
		}
	}
	for _, w := range []rec{
		{codersdk.AuditActionCreate, "devs", 201},
		{codersdk.AuditActionCreate, "", 403},
		{codersdk.AuditActionWrite, "devs", 200},
		{codersdk.AuditActionWrite, "developers", 200},
		{codersdk.AuditActionWrite, "Everyone", 400},
		{codersdk.AuditActionDelete, "developers", 200},
		{codersdk.AuditActionDelete, "developers", 403},
	} {
		if !slices.Contains(got, w) {
			t.Errorf("audit: no record %+v in %+v", w, got)
		}
	}
	_ = aliceUser
}

func TestTemplateACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk"})
	owner, _ := d.CreateFirstUser(t)
	alice, _ := d.CreateUser(t, owner, "alice")
	bob, _ := d.CreateUser(t, owner, "bob")
	daemon := d.NewDaemon(t, "acl", nil)
	tpl := coderdtest.CreateTemplate(t, owner, daemon, "acl", coderdtest.MinimalTemplate, nil)

	// By default everyone may use a new template.
	acl, err := owner.TemplateACL(ctx, tpl.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(acl.Groups) != 1 || !acl.Groups[0].IsEveryone() || acl.Groups[0].Role != codersdk.TemplateRoleUse || len(acl.Users) != 0 {
		t.Fatalf("a new template's ACL: got %+v, want Everyone: use", acl)
	}
	ws, err := alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "before"})
	if err != nil {
		t.Fatalf("alice creating a workspace from a shared template: %v", err)
	}
	daemon.RunOne(t)

	// Members neither read nor change the ACL.
	if _, err := alice.TemplateACL(ctx, tpl.ID); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("a member reading the ACL: got %v, want 403", err)
	}
	if err := alice.UpdateTemplateACL(ctx, tpl.ID, codersdk.UpdateTemplateACL{UserPerms: map[string]codersdk.TemplateRole{"alice": "admin"}}); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("a member changing the ACL: got %v, want 403", err)
	}
	if err := owner.UpdateTemplateACL(ctx, tpl.ID, codersdk.UpdateTemplateACL{GroupPerms: map[string]codersdk.TemplateRole{"Everyone": "read"}}); !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("an unknown role: got %v, want 400", err)
	}

	// Narrow it: Everyone off. Alice can no longer create or start from it;
	// stopping her workspace stays possible.
	if err := owner.UpdateTemplateACL(ctx, tpl.ID, codersdk.UpdateTemplateACL{GroupPerms: map[string]codersdk.TemplateRole{"Everyone": ""}}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "after"}); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("alice creating a workspace from an unshared template: got %v, want 403", err)
	}
	if _, err := alice.CreateWorkspaceBuild(ctx, ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err != nil {
		t.Fatalf("alice stopping her workspace: %v", err)
	}
	daemon.RunOne(t)
	if _, err := alice.CreateWorkspaceBuild(ctx, ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart}); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("alice starting her workspace of an unshared template: got %v, want 403", err)
	}
	// A template alice may not use is hidden from her, as in Coder: not
	// listed, not found by ID or name.
	if list, err := alice.Templates(ctx, "default"); err != nil || slices.ContainsFunc(list, func(x codersdk.Template) bool { return x.ID == tpl.ID }) {
		t.Errorf("alice listing templates: got %v, %v; want the unshared template left out", list, err)
	}
	if _, err := alice.Template(ctx, tpl.ID); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("alice reading the unshared template: got %v, want 404", err)
	}
	if _, err := alice.TemplateByName(ctx, "default", tpl.Name); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("alice reading the unshared template by name: got %v, want 404", err)
	}
	// Owners are not bound by the ACL.
	if _, err := owner.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "owners"}); err != nil {
		t.Fatalf("the owner creating a workspace: %v", err)
	}
	daemon.RunOne(t)

	// Share it with a group alice is in: she may use it, bob still not.
	devs, err := owner.CreateGroup(ctx, "default", codersdk.CreateGroupRequest{Name: "devs"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.PatchGroup(ctx, devs.ID, codersdk.PatchGroupRequest{AddUsers: []string{"alice"}}); err != nil {
		t.Fatal(err)
	}
	if err := owner.UpdateTemplateACL(ctx, tpl.ID, codersdk.UpdateTemplateACL{GroupPerms: map[string]codersdk.TemplateRole{"devs": "use"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "after"}); err != nil {
		t.Fatalf("alice creating a workspace through her group: %v", err)
	}
	daemon.RunOne(t)
	if _, err := bob.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "bobs"}); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("bob, in no group with use: got %v, want 403", err)
	}
	// Admin for a user: bob may change the ACL, not only use the template.
	if err := owner.UpdateTemplateACL(ctx, tpl.ID, codersdk.UpdateTemplateACL{UserPerms: map[string]codersdk.TemplateRole{"bob": "admin"}}); err != nil {
		t.Fatal(err)
	}
	if err := bob.UpdateTemplateACL(ctx, tpl.ID, codersdk.UpdateTemplateACL{GroupPerms: map[string]codersdk.TemplateRole{"Everyone": "use"}}); err != nil {
		t.Fatalf("a template's user admin changing its ACL: %v", err)
	}
	// ... and push its versions: upload, import, promote (alice, with
	// "use" through her group, may not).
	up, err := alice.Upload(ctx, bytes.NewReader(coderdtest.TemplateTar(t, coderdtest.MinimalTemplate)))
	if err != nil {
		t.Fatalf("a member uploading a template tar: %v", err)
	}
	if _, err := alice.CreateTemplateVersion(ctx, "default", codersdk.CreateTemplateVersionRequest{
		StorageMethod: "file", FileID: up.ID, Provisioner: "terraform", TemplateID: tpl.ID,
	}); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("alice pushing a version of a template she may only use: got %v, want 403", err)
	}
	v2 := coderdtest.UploadVersionRequest(t, bob, coderdtest.MinimalTemplate, codersdk.CreateTemplateVersionRequest{TemplateID: tpl.ID})
	daemon.RunOne(t)
	if err := bob.UpdateActiveTemplateVersion(ctx, tpl.ID, codersdk.UpdateActiveTemplateVersion{ID: v2.ID}); err != nil {
		t.Fatalf("a template's user admin promoting a version: %v", err)
	}
	if got, err := alice.Template(ctx, tpl.ID); err != nil || got.ActiveVersionID != v2.ID {
		t.Errorf("after bob's push: got %+v %v, want active version %s", got, err, v2.ID)
	}
	acl, err = bob.TemplateACL(ctx, tpl.ID)
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for _, u := range acl.Users {
		entries = append(entries, "user:"+u.Username+"="+string(u.Role))
	}
	for _, g := range acl.Groups {
		entries = append(entries, "group:"+g.Name+"="+string(g.Role))
	}
	if want := []string{"user:bob=admin", "group:Everyone=use", "group:devs=use"}; !slices.Equal(entries, want) {
		t.Errorf("ACL: got %v, want %v", entries, want)
	}
	// A deleted group leaves the ACL.
	if err := owner.DeleteGroup(ctx, devs.ID); err != nil {
		t.Fatal(err)
	}
	if acl, err = owner.TemplateACL(ctx, tpl.ID); err != nil || len(acl.Groups) != 1 {
		t.Errorf("ACL after deleting devs: got %+v %v, want Everyone only", acl.Groups, err)
	}

	// Audited.
	logs, err := owner.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "resource_type:template action:write", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var okWrites, refused int
	for _, l := range logs.AuditLogs {
		switch l.StatusCode {
		case 200:
			okWrites++
		case 403:
			refused++
		}
	}
	if okWrites < 4 || refused < 1 {
		t.Errorf("template ACL audit: got %d successful and %d refused writes, want >= 4 and >= 1", okWrites, refused)
	}
}
