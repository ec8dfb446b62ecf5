package coderd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// The roles of the authorization matrix. "member" acts on its own things;
// "other-member" is a second member acting on the first member's things.
const (
	azOwner         = "owner"
	azTemplateAdmin = "template-admin"
	azMember        = "member"
	azOther         = "other-member"
	azAnonymous     = "anonymous"
)

var azRoles = []string{azOwner, azTemplateAdmin, azMember, azOther, azAnonymous}

// azFixture is the one deployment every row of the matrix runs against.
type azFixture struct {
	// t is the running row's subtest, so helpers called from a row's path
	// and body fail that row.
	t *testing.T
	// actor is the running row's user id ("" for anonymous).
	actor string

	d        *coderdtest.Deployment
	daemon   *coderdtest.Daemon
	clients  map[string]*codersdk.Client // by role; anonymous has no token
	users    map[string]codersdk.User    // by role, anonymous excepted
	template codersdk.Template
	fileID   string // uploaded by the owner
	// ws is each member's workspace, built by the daemon; build is the
	// member's latest build.
	ws    map[string]codersdk.Workspace
	build string
	seq   int
}

func newAZFixture(t *testing.T) *azFixture {
	t.Helper()
	ctx := context.Background()
	const psk = "authz-psk"
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: psk})
	owner, first := d.CreateFirstUser(t)
	me, err := owner.User(ctx, codersdk.Me)
	if err != nil {
		t.Fatal(err)
	}
	if me.ID != first.UserID {
		t.Fatalf("first user: got id %s, want %s", me.ID, first.UserID)
	}
	f := &azFixture{
		t: t, d: d,
		clients: map[string]*codersdk.Client{azOwner: owner, azAnonymous: d.Client()},
		users:   map[string]codersdk.User{azOwner: me},
		ws:      map[string]codersdk.Workspace{},
	}
	for role, name := range map[string]string{azTemplateAdmin: "tadmin", azMember: "alice", azOther: "bob"} {
		var roles []string
		if role == azTemplateAdmin {
			roles = []string{codersdk.RoleTemplateAdmin}
		}
		f.clients[role], f.users[role] = d.CreateUser(t, owner, name, roles...)
	}
	f.daemon = d.NewDaemon(t, "authz-daemon", nil)
	f.template = coderdtest.CreateTemplate(t, owner, f.daemon, "authz", coderdtest.MinimalTemplate, nil)
	up, err := owner.Upload(ctx, bytes.NewReader(coderdtest.TemplateTar(t, coderdtest.MinimalTemplate)))
	if err != nil {
		t.Fatal(err)
	}
	f.fileID = up.ID
	for _, role := range []string{azMember, azOther} {
		ws, err := f.clients[role].CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: f.template.ID, Name: "ws-" + role})
		if err != nil {
			t.Fatalf("create workspace of %s: %v", role, err)
		}
		f.daemon.RunOne(t)
		if ws, err = f.clients[role].Workspace(ctx, ws.ID); err != nil {
			t.Fatal(err)
		}
		if ws.LatestBuild.Status != codersdk.WorkspaceStatusRunning {
			t.Fatalf("workspace of %s: got status %s, want running", role, ws.LatestBuild.Status)
		}
		f.ws[role] = ws
	}
	f.build = f.ws[azMember].LatestBuild.ID
	return f
}

// unique returns a name no earlier call returned.
func (f *azFixture) unique(prefix string) string {
	f.seq++
	return fmt.Sprintf("%s%d", prefix, f.seq)
}

// drain runs every queued job on the daemon, so that pending builds and
// imports that earlier rows left behind do not block later ones.
func (f *azFixture) drain() {
	f.t.Helper()
	for {
		j := f.daemon.Acquire(f.t, 0)
		if j == nil {
			return
		}
		req := codersdk.CompleteJobRequest{}
		if j.Type == codersdk.ProvisionerJobTypeWorkspaceBuild {
			req.State = []byte(`{"transition":"` + string(j.Transition) + `"}`)
		}
		f.daemon.Complete(f.t, j.JobID, req)
	}
}

// idleWorkspace creates a workspace for the user of role and runs its
// first build, so a new build can be queued on it.
func (f *azFixture) idleWorkspace(role string) string {
	f.t.Helper()
	ws, err := f.clients[azOwner].CreateWorkspace(context.Background(), f.users[role].ID,
		codersdk.CreateWorkspaceRequest{TemplateID: f.template.ID, Name: f.unique("idle")})
	if err != nil {
		f.t.Fatalf("create idle workspace: %v", err)
	}
	f.drain()
	return ws.ID
}

// pendingBuild queues a build (left pending) on a new workspace of role.
func (f *azFixture) pendingBuild(role string) string {
	f.t.Helper()
	b, err := f.clients[azOwner].CreateWorkspaceBuild(context.Background(), f.idleWorkspace(role),
		codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop})
	if err != nil {
		f.t.Fatalf("queue build: %v", err)
	}
	return b.ID
}

// pendingVersion creates a template version whose import is left pending.
func (f *azFixture) pendingVersion() string {
	f.t.Helper()
	return coderdtest.UploadVersion(f.t, f.clients[azOwner], "", coderdtest.MinimalTemplate, nil).ID
}

// importedVersion creates a template version (of templateID, or of none)
// and runs its import.
func (f *azFixture) importedVersion(templateID string) string {
	f.t.Helper()
	v := coderdtest.UploadVersion(f.t, f.clients[azOwner], templateID, coderdtest.MinimalTemplate, nil)
	f.drain()
	return v.ID
}

// freshTemplate creates a template no workspace uses.
func (f *azFixture) freshTemplate() string {
	f.t.Helper()
	tpl, err := f.clients[azOwner].CreateTemplate(context.Background(), "default",
		codersdk.CreateTemplateRequest{Name: f.unique("fresh"), TemplateVersionID: f.importedVersion("")})
	if err != nil {
		f.t.Fatalf("create template: %v", err)
	}
	return tpl.ID
}

// freshUser creates a member no other row uses.
func (f *azFixture) freshUser() string {
	f.t.Helper()
	name := f.unique("user")
	u, err := f.clients[azOwner].CreateUser(context.Background(), codersdk.CreateUserRequest{
		Username: name, Email: name + "@example.com", Password: coderdtest.FirstUserPassword,
	})
	if err != nil {
		f.t.Fatalf("create user: %v", err)
	}
	return u.ID
}

// tokenID creates an API token for userID (as the owner) and returns its id.
func (f *azFixture) tokenID(userID string) string {
	f.t.Helper()
	k, err := f.clients[azOwner].CreateToken(context.Background(), userID, codersdk.CreateTokenRequest{TokenName: f.unique("tok")})
	if err != nil {
		f.t.Fatalf("create token: %v", err)
	}
	id, _, _ := strings.Cut(k.Key, "-")
	return id
}

// actorOrMember is the running row's user, or the member for anonymous.
func (f *azFixture) actorOrMember() string {
	if f.actor == "" {
		return f.users[azMember].ID
	}
	return f.actor
}

// azCase is one row of the matrix: role calls method path with body
// ([]byte is sent as a tar, anything else non-nil as JSON) and gets want.
type azCase struct {
	name   string
	role   string
	method string
	path   func(f *azFixture) string
	body   func(f *azFixture) any
	want   int
}

// azWant gives the expected status for each role; 0 leaves a role out.
type azWant struct{ owner, templateAdmin, member, other, anonymous int }

func (w azWant) of(role string) int {
	return map[string]int{azOwner: w.owner, azTemplateAdmin: w.templateAdmin, azMember: w.member, azOther: w.other, azAnonymous: w.anonymous}[role]
}

// Frequent shapes of azWant.
var (
	azEveryone   = azWant{200, 200, 200, 200, 200}
	azSignedIn   = azWant{200, 200, 200, 0, 401}
	azAdmins     = azWant{200, 200, 403, 0, 401}
	azAdmins201  = azWant{201, 201, 403, 0, 401}
	azOwnerOnly  = azWant{200, 403, 403, 0, 401}
	azOwnReadAll = azWant{200, 200, 200, 404, 401} // a member's workspace: readable by admins, hidden from other members
)

func azStatic(p string) func(*azFixture) string { return func(*azFixture) string { return p } }

// azTable expands each endpoint into one row per role.
func azTable() []azCase {
	type endpoint struct {
		name, method string
		path         func(f *azFixture) string
		body         func(f *azFixture) any
		want         azWant
	}
	member := func(f *azFixture) codersdk.User { return f.users[azMember] }
	memberWS := func(f *azFixture) codersdk.Workspace { return f.ws[azMember] }
	// newVersionPath is /api/v2/templateversions/ID/verb of a new imported
	// version of the template.
	newVersionPath := func(f *azFixture, verb string) string {
		return "/api/v2/templateversions/" + f.importedVersion(f.template.ID) + "/" + verb
	}
	transition := func(tr codersdk.WorkspaceTransition) func(*azFixture) any {
		return func(*azFixture) any { return codersdk.CreateWorkspaceBuildRequest{Transition: tr} }
	}
	endpoints := []endpoint{
		// Public.
		{name: "healthz", method: "GET", path: azStatic("/healthz"), want: azEveryone},
		{name: "buildinfo", method: "GET", path: azStatic("/api/v2/buildinfo"), want: azEveryone},

		// Users.
		{name: "users/list", method: "GET", path: azStatic("/api/v2/users"), want: azAdmins},
		{name: "users/create", method: "POST", path: azStatic("/api/v2/users"), want: azWant{201, 403, 403, 0, 401},
			body: func(f *azFixture) any {
				n := f.unique("new")
				return codersdk.CreateUserRequest{Username: n, Email: n + "@example.com", Password: coderdtest.FirstUserPassword}
			}},
		{name: "users/read-me", method: "GET", path: azStatic("/api/v2/users/me"), want: azWant{200, 200, 200, 200, 401}},
		{name: "users/read-member", method: "GET", path: func(f *azFixture) string { return "/api/v2/users/" + member(f).ID },
			want: azWant{200, 200, 200, 403, 401}},
		{name: "users/read-member-by-name", method: "GET", path: func(f *azFixture) string { return "/api/v2/users/" + member(f).Username },
			want: azWant{200, 200, 200, 403, 401}},
		{name: "users/update-roles", method: "PUT", path: func(f *azFixture) string { return "/api/v2/users/" + f.freshUser() + "/roles" },
			body: func(*azFixture) any { return codersdk.UpdateRoles{Roles: []string{codersdk.RoleTemplateAdmin}} },
			want: azOwnerOnly},
		{name: "users/promote-self-to-owner", method: "PUT", path: azStatic("/api/v2/users/me/roles"),
			body: func(*azFixture) any { return codersdk.UpdateRoles{Roles: []string{codersdk.RoleOwner}} },
			want: azWant{200, 403, 403, 403, 401}},

		{name: "users/suspend", method: "PUT", path: func(f *azFixture) string { return "/api/v2/users/" + f.freshUser() + "/status/suspend" },
			want: azOwnerOnly},
		{name: "users/activate", method: "PUT", path: func(f *azFixture) string { return "/api/v2/users/" + f.freshUser() + "/status/activate" },
			want: azOwnerOnly},
		{name: "users/suspend-self", method: "PUT", path: azStatic("/api/v2/users/me/status/suspend"),
			want: azWant{400, 403, 403, 403, 401}},

		// Deleting users (adminapi.go): owners, never themselves.
		{name: "users/delete", method: "DELETE", path: func(f *azFixture) string { return "/api/v2/users/" + f.freshUser() }, want: azOwnerOnly},
		{name: "users/delete-self", method: "DELETE", path: azStatic("/api/v2/users/me"), want: azWant{400, 403, 403, 403, 401}},

		{name: "users/update-own-profile", method: "PUT", path: azStatic("/api/v2/users/me/profile"),
			body: func(f *azFixture) any { return codersdk.UpdateUserProfileRequest{Name: f.unique("Name ")} },
			want: azWant{200, 200, 200, 200, 401}},
		{name: "users/update-member-profile", method: "PUT", path: func(f *azFixture) string { return "/api/v2/users/" + member(f).ID + "/profile" },
			body: func(f *azFixture) any { return codersdk.UpdateUserProfileRequest{Name: f.unique("Name ")} },
			want: azWant{200, 403, 200, 403, 401}},
		{name: "users/own-gitsshkey", method: "GET", path: azStatic("/api/v2/users/me/gitsshkey"), want: azWant{200, 200, 200, 200, 401}},
		{name: "users/member-gitsshkey", method: "GET", path: func(f *azFixture) string { return "/api/v2/users/" + member(f).ID + "/gitsshkey" },
			want: azWant{200, 200, 200, 403, 401}},

		// Own tokens.
		{name: "tokens/create-own", method: "POST", path: azStatic("/api/v2/users/me/keys/tokens"),
			body: func(f *azFixture) any { return codersdk.CreateTokenRequest{TokenName: f.unique("own")} },
			want: azWant{201, 201, 201, 201, 401}},
		{name: "tokens/list-own", method: "GET", path: azStatic("/api/v2/users/me/keys/tokens"), want: azWant{200, 200, 200, 200, 401}},
		{name: "tokens/delete-own", method: "DELETE",
			path: func(f *azFixture) string { return "/api/v2/users/me/keys/" + f.tokenID(f.actorOrMember()) },
			want: azWant{204, 204, 204, 204, 401}},
		// The member's tokens (the member's own row is its own tokens again).
		{name: "tokens/create-members", method: "POST", path: func(f *azFixture) string { return "/api/v2/users/" + member(f).ID + "/keys/tokens" },
			body: func(f *azFixture) any { return codersdk.CreateTokenRequest{TokenName: f.unique("for-member")} },
			want: azWant{201, 403, 201, 403, 401}},
		{name: "tokens/list-members", method: "GET", path: func(f *azFixture) string { return "/api/v2/users/" + member(f).Username + "/keys/tokens" },
			want: azWant{200, 403, 200, 403, 401}},
		{name: "tokens/delete-members", method: "DELETE",
			path: func(f *azFixture) string { return "/api/v2/users/" + member(f).ID + "/keys/" + f.tokenID(member(f).ID) },
			want: azWant{204, 403, 204, 403, 401}},
		// Naming another user's key under /users/me finds nothing.
		{name: "tokens/delete-members-as-me", method: "DELETE",
			path: func(f *azFixture) string { return "/api/v2/users/me/keys/" + f.tokenID(f.users[azMember].ID) },
			want: azWant{404, 404, 0, 404, 401}},

		// Files.
		// Anyone signed in may upload (as in Coder): a template's ACL
		// admins push its versions.
		{name: "files/upload", method: "POST", path: azStatic("/api/v2/files"), want: azWant{201, 201, 201, 0, 401},
			body: func(f *azFixture) any {
				return coderdtest.TemplateTar(f.t, map[string]string{"main.tf": "# " + f.unique("upload") + "\n"})
			}},
		{name: "files/download", method: "GET", path: func(f *azFixture) string { return "/api/v2/files/" + f.fileID }, want: azAdmins},

		// Template versions.
		{name: "templateversions/create", method: "POST", path: azStatic("/api/v2/organizations/default/templateversions"), want: azAdmins201,
			body: func(f *azFixture) any {
				return codersdk.CreateTemplateVersionRequest{StorageMethod: "file", FileID: f.fileID, Provisioner: "terraform"}
			}},
		// A version of an existing template needs "admin" on it; Everyone
		// holds only "use".
		{name: "templateversions/create-for-template", method: "POST", path: azStatic("/api/v2/organizations/default/templateversions"), want: azAdmins201,
			body: func(f *azFixture) any {
				return codersdk.CreateTemplateVersionRequest{StorageMethod: "file", FileID: f.fileID, Provisioner: "terraform", TemplateID: f.template.ID}
			}},
		{name: "templateversions/read", method: "GET", path: func(f *azFixture) string { return "/api/v2/templateversions/" + f.template.ActiveVersionID },
			want: azSignedIn},
		{name: "templateversions/logs", method: "GET", path: func(f *azFixture) string { return "/api/v2/templateversions/" + f.template.ActiveVersionID + "/logs" },
			want: azSignedIn},
		{name: "templateversions/cancel", method: "PATCH", path: func(f *azFixture) string { return "/api/v2/templateversions/" + f.pendingVersion() + "/cancel" },
			want: azAdmins},

		// Templates.
		{name: "templates/create", method: "POST", path: azStatic("/api/v2/organizations/default/templates"), want: azAdmins201,
			body: func(f *azFixture) any {
				return codersdk.CreateTemplateRequest{Name: f.unique("tpl"), TemplateVersionID: f.importedVersion("")}
			}},
		{name: "templates/list", method: "GET", path: azStatic("/api/v2/organizations/default/templates"), want: azSignedIn},
		{name: "templates/read", method: "GET", path: func(f *azFixture) string { return "/api/v2/templates/" + f.template.ID }, want: azSignedIn},
		{name: "templates/read-by-name", method: "GET", path: func(f *azFixture) string { return "/api/v2/organizations/default/templates/" + f.template.Name },
			want: azSignedIn},
		{name: "templates/versions", method: "GET", path: func(f *azFixture) string { return "/api/v2/templates/" + f.template.ID + "/versions" },
			want: azSignedIn},
		{name: "templates/update-active-version", method: "PATCH", path: func(f *azFixture) string { return "/api/v2/templates/" + f.template.ID + "/versions" },
			body: func(f *azFixture) any {
				return codersdk.UpdateActiveTemplateVersion{ID: f.importedVersion(f.template.ID)}
			},
			want: azAdmins},
		// Archiving versions (adminapi.go): template admins.
		{name: "templates/archive-versions", method: "POST", path: func(f *azFixture) string { return "/api/v2/templates/" + f.freshTemplate() + "/versions/archive" },
			body: func(*azFixture) any { return codersdk.ArchiveTemplateVersionsRequest{All: true} }, want: azAdmins},
		{name: "templateversions/archive", method: "POST", path: func(f *azFixture) string { return newVersionPath(f, "archive") }, want: azAdmins},
		{name: "templateversions/unarchive", method: "POST", path: func(f *azFixture) string { return newVersionPath(f, "unarchive") }, want: azAdmins},
		{name: "templates/delete", method: "DELETE", path: func(f *azFixture) string { return "/api/v2/templates/" + f.freshTemplate() }, want: azAdmins},

		// Workspaces.
		{name: "workspaces/create-for-self", method: "POST", path: azStatic("/api/v2/users/me/workspaces"),
			body: func(f *azFixture) any {
				return codersdk.CreateWorkspaceRequest{TemplateID: f.template.ID, Name: f.unique("self")}
			},
			want: azWant{201, 201, 201, 201, 401}},
		{name: "workspaces/create-for-member", method: "POST", path: func(f *azFixture) string { return "/api/v2/users/" + member(f).ID + "/workspaces" },
			body: func(f *azFixture) any {
				return codersdk.CreateWorkspaceRequest{TemplateID: f.template.ID, Name: f.unique("for-member")}
			},
			want: azWant{201, 403, 201, 403, 401}},
		{name: "workspaces/list", method: "GET", path: azStatic("/api/v2/workspaces"), want: azWant{200, 200, 200, 200, 401}},
		{name: "workspaces/read-members", method: "GET", path: func(f *azFixture) string { return "/api/v2/workspaces/" + memberWS(f).ID }, want: azOwnReadAll},
		{name: "workspaces/read-members-by-name", method: "GET",
			path: func(f *azFixture) string {
				return "/api/v2/users/" + member(f).Username + "/workspace/" + memberWS(f).Name
			},
			// Another member may not look up users at all, so the answer
			// does not reveal whether the user exists.
			want: azWant{200, 200, 200, 403, 401}},
		{name: "workspaces/builds-of-members", method: "GET", path: func(f *azFixture) string { return "/api/v2/workspaces/" + memberWS(f).ID + "/builds" },
			want: azOwnReadAll},
		{name: "builds/start-members", method: "POST", path: func(f *azFixture) string { return "/api/v2/workspaces/" + f.idleWorkspace(azMember) + "/builds" },
			body: transition(codersdk.WorkspaceTransitionStart), want: azWant{201, 403, 201, 404, 401}},
		{name: "builds/stop-members", method: "POST", path: func(f *azFixture) string { return "/api/v2/workspaces/" + f.idleWorkspace(azMember) + "/builds" },
			body: transition(codersdk.WorkspaceTransitionStop), want: azWant{201, 403, 201, 404, 401}},
		{name: "builds/delete-members", method: "POST", path: func(f *azFixture) string { return "/api/v2/workspaces/" + f.idleWorkspace(azMember) + "/builds" },
			body: transition(codersdk.WorkspaceTransitionDelete), want: azWant{201, 403, 201, 404, 401}},
		{name: "builds/cancel-members", method: "PATCH", path: func(f *azFixture) string { return "/api/v2/workspacebuilds/" + f.pendingBuild(azMember) + "/cancel" },
			want: azWant{200, 403, 200, 404, 401}},
		{name: "builds/read-members", method: "GET", path: func(f *azFixture) string { return "/api/v2/workspacebuilds/" + f.build }, want: azOwnReadAll},
		{name: "builds/logs-of-members", method: "GET", path: func(f *azFixture) string { return "/api/v2/workspacebuilds/" + f.build + "/logs" },
			want: azOwnReadAll},
		{name: "builds/state-of-members", method: "GET", path: func(f *azFixture) string { return "/api/v2/workspacebuilds/" + f.build + "/state" },
			want: azWant{200, 403, 200, 404, 401}},
		// Replacing a build's state (coder state push, adminapi.go): owners only.
		{name: "builds/put-state-of-members", method: "PUT", path: func(f *azFixture) string { return "/api/v2/workspacebuilds/" + f.build + "/state" },
			body: func(*azFixture) any { return codersdk.UpdateWorkspaceBuildStateRequest{State: []byte(`{"version":4}`)} },
			want: azWant{200, 403, 403, 404, 401}},

		// Provisioner daemons.
		{name: "provisionerdaemons/list", method: "GET", path: azStatic("/api/v2/provisionerdaemons"), want: azAdmins},
		{name: "provisionerdaemons/list-org", method: "GET", path: azStatic("/api/v2/organizations/default/provisionerdaemons"), want: azAdmins},
		{name: "provisionerdaemons/register-org", method: "POST", path: azStatic("/api/v2/provisionerdaemons"), want: azAdmins201,
			body: func(f *azFixture) any {
				return codersdk.RegisterProvisionerDaemonRequest{Name: f.unique("pd"), Version: "test"}
			}},
		{name: "provisionerdaemons/register-user-scope", method: "POST", path: azStatic("/api/v2/provisionerdaemons"),
			body: func(f *azFixture) any {
				return codersdk.RegisterProvisionerDaemonRequest{Name: f.unique("pd"), Version: "test", Tags: map[string]string{codersdk.TagScope: codersdk.ProvisionerScopeUser}}
			},
			want: azWant{201, 201, 201, 0, 401}},
		// Acquiring for the organization's daemon with a member's token; the
		// admins' rows are left out because they would take a queued job.
		{name: "provisionerdaemons/acquire-org-daemon", method: "POST",
			path: func(f *azFixture) string { return "/api/v2/provisionerdaemons/" + f.daemon.ID + "/acquire?wait=0s" },
			want: azWant{0, 0, 403, 0, 401}},

		// Agent endpoints take agent tokens only: every user token gets 401.
		{name: "workspaceagents/me-metadata", method: "POST", path: azStatic("/api/v2/workspaceagents/me/metadata"),
			body: func(*azFixture) any { return codersdk.PostAgentMetadataRequest{} }, want: azWant{401, 401, 401, 401, 401}},
		{name: "workspaceagents/me-manifest", method: "GET", path: azStatic("/api/v2/workspaceagents/me/manifest"), want: azWant{401, 401, 401, 401, 401}},

		// Organizations.
		{name: "organizations/list", method: "GET", path: azStatic("/api/v2/organizations"), want: azSignedIn},
		{name: "organizations/read", method: "GET", path: azStatic("/api/v2/organizations/default"), want: azSignedIn},

		// The audit log.
		{name: "audit/list", method: "GET", path: azStatic("/api/v2/audit"), want: azOwnerOnly},
		{name: "audit/list-filtered", method: "GET", path: azStatic("/api/v2/audit?q=action:login&limit=5"), want: azOwnerOnly},
		// The replicas serving the deployment.
		{name: "replicas/list", method: "GET", path: azStatic("/api/v2/replicas"), want: azOwnerOnly},
		// The appliance overview: owners only; a coderd without an
		// appliance (as here) answers them 404.
		{name: "appliance/overview", method: "GET", path: azStatic("/api/v2/appliance"), want: azWant{404, 403, 403, 0, 401}},
	}
	var rows []azCase
	for _, e := range endpoints {
		for _, role := range azRoles {
			if w := e.want.of(role); w != 0 {
				rows = append(rows, azCase{name: e.name, role: role, method: e.method, path: e.path, body: e.body, want: w})
			}
		}
	}
	return rows
}

func TestAuthzMatrix(t *testing.T) {
	f := newAZFixture(t)
	rows := azTable()
	t.Logf("%d rows", len(rows))
	for _, tc := range rows {
		t.Run(tc.name+"/"+tc.role, func(t *testing.T) {
			f.t, f.actor = t, f.users[tc.role].ID
			path := tc.path(f)
			var body io.Reader
			contentType := ""
			if tc.body != nil {
				switch b := tc.body(f).(type) {
				case []byte:
					body, contentType = bytes.NewReader(b), codersdk.ContentTypeTar
				default:
					buf, err := json.Marshal(b)
					if err != nil {
						t.Fatal(err)
					}
					body, contentType = bytes.NewReader(buf), "application/json"
				}
			}
			status, resp := coderdtest.Do(t, tc.method, f.d.URL.String()+path, f.clients[tc.role].SessionToken, body, contentType)
			if status != tc.want {
				t.Fatalf("%s %s as %s: got %d, want %d: %s", tc.method, path, tc.role, status, tc.want, resp)
			}
			if status >= 400 {
				var e codersdk.Response
				if err := json.Unmarshal(resp, &e); err != nil || e.Message == "" {
					t.Errorf("%s %s as %s: got body %q, want the error envelope with a message", tc.method, path, tc.role, resp)
				}
			}
		})
	}
	// Listing answers 200 for everyone; what it lists must follow the same
	// rules as reading one workspace.
	t.Run("workspaces/list-is-scoped", func(t *testing.T) {
		ctx := context.Background()
		for _, tc := range []struct {
			role, owner string
			seesMember  bool
		}{
			{azOwner, "", true},
			{azTemplateAdmin, "", true},
			{azMember, "", true},
			{azOther, "", false},
			{azOther, f.users[azMember].Username, false},
		} {
			res, err := f.clients[tc.role].Workspaces(ctx, codersdk.WorkspaceFilter{Owner: tc.owner})
			if err != nil {
				t.Fatalf("list as %s: %v", tc.role, err)
			}
			seen := false
			for _, w := range res.Workspaces {
				seen = seen || w.OwnerID == f.users[azMember].ID
				if !tc.seesMember && w.OwnerID != f.users[tc.role].ID {
					t.Errorf("list owner:%q as %s: got workspace %s of %s, want only the caller's", tc.owner, tc.role, w.Name, w.OwnerName)
				}
			}
			if seen != tc.seesMember {
				t.Errorf("list owner:%q as %s: got the member's workspaces listed %v, want %v", tc.owner, tc.role, seen, tc.seesMember)
			}
		}
	})

	// Nothing a row did may leave a job the daemon cannot finish.
	f.t = t
	f.drain()
	if status, resp := coderdtest.Do(t, http.MethodGet, f.d.URL.String()+"/api/v2/users/me", f.clients[azMember].SessionToken, nil, ""); status != http.StatusOK {
		t.Errorf("member after the matrix: got %d, want 200: %s", status, resp)
	}
}
