package coderd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// auditLogs lists the audit log as the owner, with query q.
func auditLogs(t testing.TB, owner *codersdk.Client, q string) []codersdk.AuditLog {
	t.Helper()
	resp, err := owner.AuditLogs(context.Background(), codersdk.AuditLogsRequest{SearchQuery: q, Limit: 1000})
	if err != nil {
		t.Fatalf("list audit logs %q: %v", q, err)
	}
	if int(resp.Count) != len(resp.AuditLogs) {
		t.Fatalf("list audit logs %q: got count %d for %d records, want them equal below the limit", q, resp.Count, len(resp.AuditLogs))
	}
	return resp.AuditLogs
}

// auditWant describes one record a test expects.
type auditWant struct {
	actor        string // username or "anonymous"
	action       codersdk.AuditAction
	resourceType codersdk.AuditResourceType
	target       string // resource_target, "" for any
	workspace    string // owner/name, "" for none
	status       int
	fields       map[string]any // each must be present with this value (JSON-decoded)
}

func (w auditWant) String() string {
	return fmt.Sprintf("%s %s %s %q workspace %q status %d fields %v", w.actor, w.action, w.resourceType, w.target, w.workspace, w.status, w.fields)
}

func (w auditWant) matches(l codersdk.AuditLog) bool {
	if l.Actor() != w.actor || l.Action != w.action || l.ResourceType != w.resourceType || l.StatusCode != w.status {
		return false
	}
	if w.target != "" && l.ResourceTarget != w.target {
		return false
	}
	ws := ""
	if l.WorkspaceName != "" {
		ws = l.WorkspaceOwner + "/" + l.WorkspaceName
	}
	if ws != w.workspace {
		return false
	}
	var fields map[string]any
	if err := json.Unmarshal(l.AdditionalFields, &fields); err != nil {
		return false
	}
	for k, v := range w.fields {
		got, _ := json.Marshal(fields[k])
		want, _ := json.Marshal(v)
		if string(got) != string(want) {
			return false
		}
	}
	return true
}

// requireAudit finds the record w describes and checks what every record
// carries: the source IP and an outcome that agrees with the status.
func requireAudit(t testing.TB, logs []codersdk.AuditLog, w auditWant) codersdk.AuditLog {
	t.Helper()
	for _, l := range logs {
		if !w.matches(l) {
			continue
		}
		if l.IP != "127.0.0.1" {
			t.Errorf("record %s: got ip %q, want 127.0.0.1", w, l.IP)
		}
		wantOutcome := codersdk.AuditOutcomeSuccess
		if w.status >= 400 {
			wantOutcome = codersdk.AuditOutcomeFailure
		}
		if l.Outcome != wantOutcome {
			t.Errorf("record %s: got outcome %s, want %s", w, l.Outcome, wantOutcome)
		}
		if w.actor != "anonymous" && (l.User == nil || l.User.ID == "") {
			t.Errorf("record %s: got no user id", w)
		}
		return l
	}
	var got []string
	for _, l := range logs {
		got = append(got, fmt.Sprintf("%s %s %s %q ws %s/%s %d %s", l.Actor(), l.Action, l.ResourceType, l.ResourceTarget, l.WorkspaceOwner, l.WorkspaceName, l.StatusCode, l.AdditionalFields))
	}
	t.Fatalf("no audit record %s among:\n%s", w, strings.Join(got, "\n"))
	return codersdk.AuditLog{}
}

// TestAuditRecordsActions drives every audited action through the API, as
// a user would, and finds its record with actor, IP and outcome.
func TestAuditRecordsActions(t *testing.T) {
	ctx := context.Background()
	d, owner, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{}, "audit-daemon")

	// Logins that fail: a wrong password, an unknown email.
	anon := d.Client()
	if _, err := anon.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "admin@example.com", Password: "wrong-password"}); !codersdk.IsStatus(err, http.StatusUnauthorized) {
		t.Fatalf("wrong password: got %v, want 401", err)
	}
	if _, err := anon.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "nobody@example.com", Password: "whatever-it-is"}); !codersdk.IsStatus(err, http.StatusUnauthorized) {
		t.Fatalf("unknown email: got %v, want 401", err)
	}
	// Users: create, role change, profile change; alice logs in (in
	// CreateUser), then out.
	alice, aliceUser := d.CreateUser(t, owner, "alice")
	bob, _ := d.CreateUser(t, owner, "bob")
	tadmin, _ := d.CreateUser(t, owner, "tadmin")
	if _, err := owner.UpdateUserRoles(ctx, "tadmin", []string{codersdk.RoleTemplateAdmin}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.UpdateUserProfile(ctx, codersdk.Me, codersdk.UpdateUserProfileRequest{Name: "Alice Liddell"}); err != nil {
		t.Fatal(err)
	}
	second := d.Client()
	login, err := second.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "alice@example.com", Password: coderdtest.FirstUserPassword})
	if err != nil {
		t.Fatal(err)
	}
	second.SessionToken = login.SessionToken
	if err := second.Logout(ctx); err != nil {
		t.Fatal(err)
	}
	// Tokens.
	tok, err := alice.CreateToken(ctx, codersdk.Me, codersdk.CreateTokenRequest{TokenName: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	tokID, _, _ := strings.Cut(tok.Key, "-")
	if err := alice.DeleteAPIKey(ctx, codersdk.Me, tokID); err != nil {
		t.Fatal(err)
	}
	// Templates: push a version, create the template, push and activate
	// another version, create and delete a second template. A member may
	// not push.
	tpl := coderdtest.CreateTemplate(t, owner, daemon, "base", coderdtest.MinimalTemplate, nil)
	v2 := coderdtest.UploadVersion(t, owner, tpl.ID, coderdtest.MinimalTemplate, nil)
	daemon.RunOne(t)
	if err := owner.UpdateActiveTemplateVersion(ctx, tpl.ID, codersdk.UpdateActiveTemplateVersion{ID: v2.ID}); err != nil {
		t.Fatal(err)
	}
	doomed := coderdtest.CreateTemplate(t, owner, daemon, "doomed", coderdtest.MinimalTemplate, nil)
	if err := owner.DeleteTemplate(ctx, doomed.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.CreateTemplateVersion(ctx, "default", codersdk.CreateTemplateVersionRequest{StorageMethod: "file", FileID: "x"}); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("member pushing a template: got %v, want 403", err)
	}
	// Workspaces: create, stop, start, delete; bob tries alice's.
	ws, err := alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	daemon.RunOne(t)
	for _, tr := range []codersdk.WorkspaceTransition{codersdk.WorkspaceTransitionStop, codersdk.WorkspaceTransitionStart} {
		if _, err := alice.CreateWorkspaceBuild(ctx, ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: tr}); err != nil {
			t.Fatal(err)
		}
		daemon.RunOne(t)
	}
	if _, err := bob.CreateWorkspaceBuild(ctx, ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("bob stopping alice's workspace: got %v, want 404", err)
	}
	if _, err := tadmin.CreateWorkspaceBuild(ctx, ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("a template admin stopping alice's workspace: got %v, want 403", err)
	}
	if _, err := alice.CreateWorkspaceBuild(ctx, ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionDelete}); err != nil {
		t.Fatal(err)
	}
	daemon.RunOne(t)

	logs := auditLogs(t, owner, "")
	for _, w := range []auditWant{
		{actor: "anonymous", action: codersdk.AuditActionCreate, resourceType: codersdk.AuditResourceUser, target: "admin", status: 201,
			fields: map[string]any{"first_user": true, "email": "admin@example.com"}},
		{actor: "admin", action: codersdk.AuditActionLogin, resourceType: codersdk.AuditResourceUser, target: "admin", status: 201,
			fields: map[string]any{"email": "admin@example.com"}},
		{actor: "anonymous", action: codersdk.AuditActionLogin, resourceType: codersdk.AuditResourceUser, target: "admin@example.com", status: 401,
			fields: map[string]any{"email": "admin@example.com", "error": "Incorrect email or password"}},
		{actor: "anonymous", action: codersdk.AuditActionLogin, resourceType: codersdk.AuditResourceUser, target: "nobody@example.com", status: 401,
			fields: map[string]any{"email": "nobody@example.com"}},
		{actor: "admin", action: codersdk.AuditActionCreate, resourceType: codersdk.AuditResourceUser, target: "alice", status: 201,
			fields: map[string]any{"email": "alice@example.com", "roles": []string{}}},
		{actor: "admin", action: codersdk.AuditActionWrite, resourceType: codersdk.AuditResourceUser, target: "tadmin", status: 200,
			fields: map[string]any{"roles": []string{codersdk.RoleTemplateAdmin}, "previous_roles": []string{}}},
		{actor: "alice", action: codersdk.AuditActionWrite, resourceType: codersdk.AuditResourceUser, target: "alice", status: 200,
			fields: map[string]any{"name": "Alice Liddell", "previous_name": ""}},
		{actor: "alice", action: codersdk.AuditActionLogin, resourceType: codersdk.AuditResourceUser, target: "alice", status: 201},
		{actor: "alice", action: codersdk.AuditActionLogout, resourceType: codersdk.AuditResourceUser, target: "alice", status: 200},
		{actor: "alice", action: codersdk.AuditActionCreate, resourceType: codersdk.AuditResourceAPIKey, target: "ci", status: 201,
			fields: map[string]any{"user": "alice", "lifetime": "720h0m0s"}},
		{actor: "alice", action: codersdk.AuditActionDelete, resourceType: codersdk.AuditResourceAPIKey, status: 204,
			fields: map[string]any{"user": "alice"}},
		{actor: "admin", action: codersdk.AuditActionCreate, resourceType: codersdk.AuditResourceTemplateVersion, target: v2.Name, status: 201,
			fields: map[string]any{"template": "base"}},
		{actor: "admin", action: codersdk.AuditActionCreate, resourceType: codersdk.AuditResourceTemplate, target: "base", status: 201},
		{actor: "admin", action: codersdk.AuditActionWrite, resourceType: codersdk.AuditResourceTemplate, target: "base", status: 200,
			fields: map[string]any{"active_version_id": v2.ID, "previous_active_version_id": tpl.ActiveVersionID}},
		{actor: "admin", action: codersdk.AuditActionDelete, resourceType: codersdk.AuditResourceTemplate, target: "doomed", status: 200},
		{actor: "alice", action: codersdk.AuditActionCreate, resourceType: codersdk.AuditResourceTemplateVersion, status: 403,
			fields: map[string]any{"error": "Forbidden: your role does not allow this"}},
		{actor: "alice", action: codersdk.AuditActionCreate, resourceType: codersdk.AuditResourceWorkspace, target: "dev", workspace: "alice/dev", status: 201,
			fields: map[string]any{"template": "base", "transition": "start"}},
		{actor: "alice", action: codersdk.AuditActionStop, resourceType: codersdk.AuditResourceWorkspaceBuild, workspace: "alice/dev", status: 201,
			fields: map[string]any{"transition": "stop"}},
		{actor: "alice", action: codersdk.AuditActionStart, resourceType: codersdk.AuditResourceWorkspaceBuild, workspace: "alice/dev", status: 201,
			fields: map[string]any{"transition": "start"}},
		{actor: "bob", action: codersdk.AuditActionStop, resourceType: codersdk.AuditResourceWorkspaceBuild, workspace: "alice/dev", status: 404,
			fields: map[string]any{"error": "Workspace not found"}},
		{actor: "tadmin", action: codersdk.AuditActionStop, resourceType: codersdk.AuditResourceWorkspaceBuild, workspace: "alice/dev", status: 403},
		{actor: "alice", action: codersdk.AuditActionDelete, resourceType: codersdk.AuditResourceWorkspaceBuild, workspace: "alice/dev", status: 201,
			fields: map[string]any{"transition": "delete"}},
		{actor: "system", action: codersdk.AuditActionInstall, resourceType: codersdk.AuditResourceDeployment, target: "v0.0.0-test", status: 200,
			fields: map[string]any{"version": "v0.0.0-test", "previous_version": ""}},
	} {
		if w.resourceType == codersdk.AuditResourceDeployment {
			// Written by the server itself: no request, no IP.
			if !slices.ContainsFunc(logs, w.matches) {
				t.Errorf("no audit record %s", w)
			}
			continue
		}
		requireAudit(t, logs, w)
	}

	// A build's record names the build; the workspace's, the workspace.
	builds, err := alice.WorkspaceBuilds(ctx, ws.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range builds {
		if b.BuildNumber == 1 {
			continue // the workspace's creation
		}
		if !slices.ContainsFunc(logs, func(l codersdk.AuditLog) bool {
			return l.ResourceType == codersdk.AuditResourceWorkspaceBuild && l.ResourceID == b.ID && string(l.Action) == string(b.Transition)
		}) {
			t.Errorf("build #%d (%s): no record names it", b.BuildNumber, b.Transition)
		}
	}
	if l := requireAudit(t, logs, auditWant{actor: "alice", action: codersdk.AuditActionCreate, resourceType: codersdk.AuditResourceWorkspace,
		target: "dev", workspace: "alice/dev", status: 201}); l.ResourceID != ws.ID || l.User.ID != aliceUser.ID {
		t.Errorf("workspace record: got resource %s user %s, want %s %s", l.ResourceID, l.User.ID, ws.ID, aliceUser.ID)
	}

	// Newest first.
	for i := 1; i < len(logs); i++ {
		if logs[i].Time.After(logs[i-1].Time) {
			t.Fatalf("records %d and %d are out of order: %s after %s", i-1, i, logs[i].Time, logs[i-1].Time)
		}
	}
	// Only owners read the log.
	for name, c := range map[string]*codersdk.Client{"member": alice, "template admin": tadmin} {
		if _, err := c.AuditLogs(ctx, codersdk.AuditLogsRequest{}); !codersdk.IsStatus(err, http.StatusForbidden) {
			t.Errorf("%s listing the audit log: got %v, want 403", name, err)
		}
	}
	if _, err := anon.AuditLogs(ctx, codersdk.AuditLogsRequest{}); !codersdk.IsStatus(err, http.StatusUnauthorized) {
		t.Errorf("anonymous listing the audit log: got %v, want 401", err)
	}
}

// TestAuditFiltersAndPaging queries records written straight to the
// database at known times.
func TestAuditFiltersAndPaging(t *testing.T) {
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	base := time.Date(2026, 3, 3, 9, 0, 0, 0, time.UTC) // a Tuesday
	type rec struct {
		user, action, resType, workspace string
		at                               time.Duration
		status                           int
	}
	recs := []rec{
		{"carol", "connect", "workspace_agent", "dev", 0, 101},
		{"carol", "start", "workspace_build", "dev", time.Hour, 201},
		{"dave", "connect", "workspace_agent", "dev", 2 * time.Hour, 404},
		{"dave", "connect", "workspace_agent", "other", 3 * time.Hour, 101},
		{"carol", "login", "user", "", 24 * time.Hour, 201},
		{"", "login", "user", "", 25 * time.Hour, 401},
	}
	for i, r := range recs {
		row := database.AuditLog{
			Time: base.Add(r.at), Username: r.user, IP: "10.0.0.7", Action: r.action, ResourceType: r.resType,
			ResourceTarget: fmt.Sprintf("target-%d", i), StatusCode: r.status, Success: r.status < 400,
		}
		if r.workspace != "" {
			row.WorkspaceOwner, row.WorkspaceName = "carol", r.workspace
		}
		if _, err := d.DB.InsertAuditLog(ctx, row); err != nil {
			t.Fatal(err)
		}
	}
	targets := func(logs []codersdk.AuditLog) []string {
		var out []string
		for _, l := range logs {
			if strings.HasPrefix(l.ResourceTarget, "target-") {
				out = append(out, l.ResourceTarget)
			}
		}
		return out
	}
	for _, tc := range []struct {
		q    string
		want []string // newest first
	}{
		{"username:carol", []string{"target-4", "target-1", "target-0"}},
		{"user:DAVE", []string{"target-3", "target-2"}},
		{"action:connect", []string{"target-3", "target-2", "target-0"}},
		{"resource_type:workspace_build", []string{"target-1"}},
		{"workspace:dev", []string{"target-2", "target-1", "target-0"}},
		{"workspace:carol/other", []string{"target-3"}},
		{"workspace:bob/dev", nil},
		{"since:2026-03-03T10:00:00Z until:2026-03-03T12:00:00Z", []string{"target-2", "target-1"}},
		{"since:2026-03-04", []string{"target-5", "target-4"}},
		{"outcome:failure since:2026-03-03", []string{"target-5", "target-2"}},
		{"workspace:dev action:connect outcome:success", []string{"target-0"}},
	} {
		t.Run(tc.q, func(t *testing.T) {
			if got := targets(auditLogs(t, owner, tc.q)); !slices.Equal(got, tc.want) {
				t.Errorf("q=%q: got %v, want %v", tc.q, got, tc.want)
			}
		})
	}

	t.Run("Paging", func(t *testing.T) {
		all := auditLogs(t, owner, "since:2026-03-03 until:2026-03-05")
		if len(all) != 6 {
			t.Fatalf("got %d records, want 6", len(all))
		}
		var paged []string
		for offset := 0; offset < 6; offset += 4 {
			resp, err := owner.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "since:2026-03-03 until:2026-03-05", Limit: 4, Offset: offset})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Count != 6 {
				t.Errorf("offset %d: got count %d, want 6 (all matches, not the page)", offset, resp.Count)
			}
			paged = append(paged, targets(resp.AuditLogs)...)
		}
		if want := targets(all); !slices.Equal(paged, want) {
			t.Errorf("pages: got %v, want %v", paged, want)
		}
	})

	t.Run("BadQueries", func(t *testing.T) {
		for _, q := range []string{"colour:blue", "since:yesterday", "outcome:maybe", "carol"} {
			if _, err := owner.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: q}); !codersdk.IsStatus(err, http.StatusBadRequest) {
				t.Errorf("q=%q: got %v, want 400", q, err)
			}
		}
		status, body := coderdtest.Do(t, http.MethodGet, d.URL.String()+"/api/v2/audit?limit=5000", owner.SessionToken, nil, "")
		if status != http.StatusBadRequest {
			t.Errorf("limit=5000: got %s, want 400", coderdtest.String(status, body))
		}
	})
}

// TestAuditLoginRateLimited: a login the rate limit refuses before the
// login handler runs is recorded too.
func TestAuditLoginRateLimited(t *testing.T) {
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	anon := d.Client()
	limited := false
	for range 50 {
		_, err := anon.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "admin@example.com", Password: "guess-guess"})
		if codersdk.IsStatus(err, http.StatusTooManyRequests) {
			limited = true
			break
		}
		if !codersdk.IsStatus(err, http.StatusUnauthorized) {
			t.Fatalf("wrong password: got %v, want 401 or 429", err)
		}
	}
	if !limited {
		t.Fatal("50 failed logins in a row were never refused with 429: the login rate limit did not apply")
	}
	logs := auditLogs(t, owner, "action:login outcome:failure")
	requireAudit(t, logs, auditWant{actor: "anonymous", action: codersdk.AuditActionLogin, resourceType: codersdk.AuditResourceUser, status: http.StatusTooManyRequests})
	requireAudit(t, logs, auditWant{actor: "anonymous", action: codersdk.AuditActionLogin, resourceType: codersdk.AuditResourceUser,
		target: "admin@example.com", status: http.StatusUnauthorized, fields: map[string]any{"email": "admin@example.com"}})
}
