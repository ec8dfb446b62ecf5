package coderd_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// adminFixture is a deployment with an owner, a member alice, a daemon the
// test drives and a template "tpl" whose active version alice's running
// workspace uses.
type adminFixture struct {
	d      *coderdtest.Deployment
	owner  *codersdk.Client
	alice  *codersdk.Client
	daemon *coderdtest.Daemon
	tpl    codersdk.Template
	ws     codersdk.Workspace
}

func newAdminFixture(t *testing.T) *adminFixture {
	t.Helper()
	const psk = "admin-psk"
	f := &adminFixture{d: coderdtest.New(t, coderdtest.Options{ProvisionerPSK: psk})}
	f.owner, _ = f.d.CreateFirstUser(t)
	f.alice, _ = f.d.CreateUser(t, f.owner, "alice")
	f.daemon = f.d.NewDaemon(t, "admin-daemon", nil)
	f.tpl = coderdtest.CreateTemplate(t, f.owner, f.daemon, "tpl", coderdtest.MinimalTemplate, nil)
	ctx := context.Background()
	ws, err := f.alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: f.tpl.ID, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	f.daemon.RunOne(t)
	if f.ws, err = f.alice.Workspace(ctx, ws.ID); err != nil {
		t.Fatal(err)
	}
	return f
}

// auditHas reports whether the audit log holds a successful record of
// action on a resource of type res named target.
func auditHas(t *testing.T, owner *codersdk.Client, action codersdk.AuditAction, res codersdk.AuditResourceType, target string) bool {
	t.Helper()
	logs, err := owner.AuditLogs(context.Background(), codersdk.AuditLogsRequest{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs.AuditLogs {
		if l.Action == action && l.ResourceType == res && l.ResourceTarget == target && l.Outcome == codersdk.AuditOutcomeSuccess {
			return true
		}
	}
	return false
}

// TestDeleteUser: DELETE /api/v2/users/{user} ends the user's session,
// frees the name, is audited, and is refused for a user who owns
// workspaces and for the caller itself.
func TestDeleteUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAdminFixture(t)
	bob, _ := f.d.CreateUser(t, f.owner, "bob")

	if err := f.owner.DeleteUser(ctx, "bob"); err != nil {
		t.Fatalf("delete bob: %v", err)
	}
	if _, err := bob.User(ctx, codersdk.Me); !codersdk.IsStatus(err, http.StatusUnauthorized) {
		t.Errorf("bob's session after the delete: got %v, want 401", err)
	}
	if _, err := f.owner.User(ctx, "bob"); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("GET users/bob after the delete: got %v, want 404", err)
	}
	if err := f.owner.DeleteUser(ctx, "bob"); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("delete bob twice: got %v, want 404", err)
	}
	f.d.CreateUser(t, f.owner, "bob") // the name is free again
	if !auditHas(t, f.owner, codersdk.AuditActionDelete, codersdk.AuditResourceUser, "bob") {
		t.Error("no audit record of the delete of bob")
	}

	for _, tc := range []struct {
		name   string
		client *codersdk.Client
		user   string
		status int
		want   string
	}{
		{"owns a workspace", f.owner, "alice", http.StatusConflict, "User alice owns 1 workspace(s)"},
		{"self", f.owner, codersdk.Me, http.StatusBadRequest, "You cannot delete yourself"},
		{"member", f.alice, "bob", http.StatusForbidden, "Forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.client.DeleteUser(ctx, tc.user)
			if !codersdk.IsStatus(err, tc.status) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("delete %s: got %v, want %d saying %q", tc.user, err, tc.status, tc.want)
			}
		})
	}
	if _, err := f.owner.User(ctx, "alice"); err != nil {
		t.Errorf("alice after the refusal: %v", err)
	}
}

// versionNames lists the names of a template's versions, newest first.
func versionNames(t *testing.T, vs []codersdk.TemplateVersion) []string {
	t.Helper()
	names := []string{}
	for _, v := range vs {
		names = append(names, v.Name)
	}
	return names
}

// TestArchiveTemplateVersions: POST .../versions/archive archives the
// failed unused versions (with all, every unused one); archived versions
// leave the list unless include_archived; the active version, versions in
// use and pending imports are never archived; one version can be
// unarchived.
func TestArchiveTemplateVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAdminFixture(t)
	active := f.tpl.ActiveVersionID
	newVersion := func(name string) codersdk.TemplateVersion {
		return coderdtest.UploadVersionRequest(t, f.owner, coderdtest.MinimalTemplate, codersdk.CreateTemplateVersionRequest{Name: name, TemplateID: f.tpl.ID})
	}
	newVersion("good")
	f.daemon.RunOne(t)
	newVersion("bad")
	j := f.daemon.Acquire(t, 10e9)
	if err := f.daemon.Client.FailJob(ctx, f.daemon.ID, j.JobID, codersdk.FailJobRequest{Error: "terraform init failed"}); err != nil {
		t.Fatal(err)
	}
	newVersion("pending") // its import never runs

	list := func(all bool) []string {
		t.Helper()
		var vs []codersdk.TemplateVersion
		var err error
		if all {
			vs, err = f.owner.TemplateVersionsIncludingArchived(ctx, f.tpl.ID)
		} else {
			vs, err = f.owner.TemplateVersionsByTemplate(ctx, f.tpl.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		return versionNames(t, vs)
	}
	if got := list(false); len(got) != 4 {
		t.Fatalf("versions before archiving: got %q, want 4", got)
	}

	resp, err := f.owner.ArchiveTemplateVersions(ctx, f.tpl.ID, false)
	if err != nil || len(resp.ArchivedIDs) != 1 {
		t.Fatalf("archive failed versions: got %+v, %v, want one archived", resp, err)
	}
	if got := list(false); slices.Contains(got, "bad") || len(got) != 3 {
		t.Errorf("versions after archiving the failed one: got %q, want all but bad", got)
	}
	if got := list(true); !slices.Contains(got, "bad") || len(got) != 4 {
		t.Errorf("versions with include_archived: got %q, want all four", got)
	}

	resp, err = f.owner.ArchiveTemplateVersions(ctx, f.tpl.ID, true)
	if err != nil || len(resp.ArchivedIDs) != 1 {
		t.Fatalf("archive all unused versions: got %+v, %v, want one more (good)", resp, err)
	}
	got := list(false)
	if len(got) != 2 || slices.Contains(got, "good") || !slices.Contains(got, "pending") {
		t.Errorf("versions after archiving all unused: got %q, want the active one and the pending one", got)
	}
	if !auditHas(t, f.owner, codersdk.AuditActionWrite, codersdk.AuditResourceTemplate, "tpl") {
		t.Error("no audit record of the archive")
	}

	// One version at a time: the active one is refused; an archived one
	// comes back.
	if err := f.owner.SetArchiveTemplateVersion(ctx, active, true); !codersdk.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "active version") {
		t.Errorf("archive the active version: got %v, want 400 saying it is active", err)
	}
	vs, err := f.owner.TemplateVersionsIncludingArchived(ctx, f.tpl.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Name == "bad" {
			if err := f.owner.SetArchiveTemplateVersion(ctx, v.ID, false); err != nil {
				t.Fatalf("unarchive bad: %v", err)
			}
			if err := f.alice.SetArchiveTemplateVersion(ctx, v.ID, true); !codersdk.IsStatus(err, http.StatusForbidden) {
				t.Errorf("a member archives a version: got %v, want 403", err)
			}
		}
	}
	if got := list(false); !slices.Contains(got, "bad") {
		t.Errorf("versions after unarchiving bad: got %q, want it listed", got)
	}

	// An archived version cannot be promoted; unarchived, it can.
	for _, v := range vs {
		if v.Name != "good" {
			continue
		}
		err := f.owner.UpdateActiveTemplateVersion(ctx, f.tpl.ID, codersdk.UpdateActiveTemplateVersion{ID: v.ID})
		if !codersdk.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "Template version good is archived") {
			t.Errorf("promote the archived version good: got %v, want 400 saying it is archived", err)
		}
		// Nor built: a workspace naming it is refused (as Coder).
		_, err = f.owner.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateVersionID: v.ID, Name: "from-archived"})
		if !codersdk.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "Template version good is archived") {
			t.Errorf("create a workspace from the archived version good: got %v, want 400 saying it is archived", err)
		}
		if !v.Archived {
			t.Errorf("the version list says good is not archived: %+v", v)
		}
		if err := f.owner.SetArchiveTemplateVersion(ctx, v.ID, false); err != nil {
			t.Fatal(err)
		}
		if err := f.owner.UpdateActiveTemplateVersion(ctx, f.tpl.ID, codersdk.UpdateActiveTemplateVersion{ID: v.ID}); err != nil {
			t.Errorf("promote good once unarchived: %v", err)
		}
	}
}

// TestPutWorkspaceBuildState: PUT /api/v2/workspacebuilds/{build}/state
// replaces the state, which the next build gets; non-JSON state and a
// build still running are refused.
func TestPutWorkspaceBuildState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAdminFixture(t)
	build := f.ws.LatestBuild.ID
	state := []byte(`{"version":4,"serial":7,"resources":[]}`)
	if err := f.owner.UpdateWorkspaceBuildState(ctx, build, state); err != nil {
		t.Fatalf("put state: %v", err)
	}
	if got, err := f.owner.WorkspaceBuildState(ctx, build); err != nil || string(got) != string(state) {
		t.Errorf("state after the put: got %q, %v, want %q", got, err, state)
	}
	if _, err := f.owner.CreateWorkspaceBuild(ctx, f.ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart}); err != nil {
		t.Fatal(err)
	}
	next, err := f.owner.WorkspaceBuilds(ctx, f.ws.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The new build is still pending: its state cannot be replaced.
	if err := f.owner.UpdateWorkspaceBuildState(ctx, next[0].ID, state); !codersdk.IsStatus(err, http.StatusConflict) {
		t.Errorf("put state on a pending build: got %v, want 409", err)
	}
	j := f.daemon.Acquire(t, 10e9)
	if j == nil || string(j.State) != string(state) {
		t.Fatalf("the next build's job: got state %q, want the pushed %q", jobState(j), state)
	}
	f.daemon.Complete(t, j.JobID, codersdk.CompleteJobRequest{State: state})

	for _, tc := range []struct {
		name   string
		state  string
		status int
	}{
		{"not JSON", "not terraform state", http.StatusBadRequest},
		{"empty", "", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := f.owner.UpdateWorkspaceBuildState(ctx, build, []byte(tc.state)); !codersdk.IsStatus(err, tc.status) {
				t.Errorf("put state %q: got %v, want %d", tc.state, err, tc.status)
			}
		})
	}
	if err := f.alice.UpdateWorkspaceBuildState(ctx, build, state); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("the workspace's owner (a member) puts state: got %v, want 403", err)
	}
	if !auditHas(t, f.owner, codersdk.AuditActionWrite, codersdk.AuditResourceWorkspaceBuild, "dev") {
		t.Error("no audit record of the state put")
	}
}

func jobState(j *codersdk.AcquiredJob) string {
	if j == nil {
		return "(no job)"
	}
	return string(j.State)
}
