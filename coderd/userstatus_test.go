package coderd_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestSuspendUser: an owner suspends a member, whose session and API token
// are refused at once and whose login is refused (after the password
// checked out); nobody else may suspend, an owner not themselves; activating
// lets the member in again. Each change has its audit record.
func TestSuspendUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	alice, aliceUser := d.CreateUser(t, owner, "alice")
	bob, _ := d.CreateUser(t, owner, "bob")
	tadmin, _ := d.CreateUser(t, owner, "tadmin", codersdk.RoleTemplateAdmin)
	tok, err := alice.CreateToken(ctx, codersdk.Me, codersdk.CreateTokenRequest{TokenName: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	aliceToken := d.Client()
	aliceToken.SessionToken = tok.Key
	login := func(password string) error {
		_, err := d.Client().LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "alice@example.com", Password: password})
		return err
	}
	// requireRefused checks err is status with a message containing want.
	requireRefused := func(what string, err error, status int, want string) {
		t.Helper()
		if !codersdk.IsStatus(err, status) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: got %v, want %d saying %q", what, err, status, want)
		}
	}

	// Who may not suspend.
	_, err = bob.SuspendUser(ctx, "alice")
	requireRefused("a member suspends alice", err, http.StatusForbidden, "Forbidden")
	_, err = tadmin.SuspendUser(ctx, aliceUser.ID)
	requireRefused("a template admin suspends alice", err, http.StatusForbidden, "Forbidden")
	_, err = alice.SuspendUser(ctx, codersdk.Me)
	requireRefused("alice suspends herself", err, http.StatusForbidden, "Forbidden")
	_, err = owner.SuspendUser(ctx, codersdk.Me)
	requireRefused("the owner suspends themselves", err, http.StatusBadRequest, "You cannot suspend yourself")
	_, err = owner.SuspendUser(ctx, "nobody")
	requireRefused("suspend an unknown user", err, http.StatusNotFound, `User "nobody" not found`)

	u, err := owner.SuspendUser(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if u.Status != codersdk.UserStatusSuspended || u.ID != aliceUser.ID {
		t.Fatalf("suspend alice: got %s status %q, want alice suspended", u.Username, u.Status)
	}
	if me, err := owner.User(ctx, "alice"); err != nil || me.Status != codersdk.UserStatusSuspended {
		t.Fatalf("read alice: got %q, %v, want suspended", me.Status, err)
	}

	// Her session and her token stop at once; her login is refused, but
	// only once the password is right.
	_, err = alice.User(ctx, codersdk.Me)
	requireRefused("alice's session", err, http.StatusUnauthorized, "User alice is suspended")
	_, err = aliceToken.Tokens(ctx, codersdk.Me)
	requireRefused("alice's API token", err, http.StatusUnauthorized, "User alice is suspended")
	requireRefused("alice logs in", login(coderdtest.FirstUserPassword), http.StatusForbidden, "Your account is suspended")
	err = login("not-her-password")
	requireRefused("alice logs in with a wrong password", err, http.StatusUnauthorized, "Incorrect email or password")
	if strings.Contains(err.Error(), "suspended") {
		t.Fatalf("a wrong password: got %v, which reveals the suspension", err)
	}
	// Other users go on as before.
	if _, err := bob.User(ctx, codersdk.Me); err != nil {
		t.Fatalf("bob after alice's suspension: %v", err)
	}
	// Suspending again is harmless.
	if u, err := owner.SuspendUser(ctx, aliceUser.ID); err != nil || u.Status != codersdk.UserStatusSuspended {
		t.Fatalf("suspend alice again: got %q, %v", u.Status, err)
	}

	_, err = bob.ActivateUser(ctx, "alice")
	requireRefused("a member activates alice", err, http.StatusForbidden, "Forbidden")
	u, err = owner.ActivateUser(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if u.Status != codersdk.UserStatusActive {
		t.Fatalf("activate alice: got status %q, want active", u.Status)
	}
	if err := login(coderdtest.FirstUserPassword); err != nil {
		t.Fatalf("alice logs in after activation: %v", err)
	}
	// Her keys were kept: they work again (docs/decisions.md).
	if _, err := aliceToken.Tokens(ctx, codersdk.Me); err != nil {
		t.Fatalf("alice's API token after activation: %v", err)
	}

	logs := auditLogs(t, owner, "resource_type:user action:write")
	for _, w := range []auditWant{
		{actor: "admin", action: codersdk.AuditActionWrite, resourceType: codersdk.AuditResourceUser, target: "alice", status: 200,
			fields: map[string]any{"status": "suspended", "previous_status": "active"}},
		{actor: "admin", action: codersdk.AuditActionWrite, resourceType: codersdk.AuditResourceUser, target: "alice", status: 200,
			fields: map[string]any{"status": "active", "previous_status": "suspended"}},
		{actor: "bob", action: codersdk.AuditActionWrite, resourceType: codersdk.AuditResourceUser, status: 403,
			fields: map[string]any{"status": "suspended"}},
		{actor: "admin", action: codersdk.AuditActionWrite, resourceType: codersdk.AuditResourceUser, target: "admin", status: 400,
			fields: map[string]any{"status": "suspended", "error": "You cannot suspend yourself; another owner can"}},
	} {
		l := requireAudit(t, logs, w)
		if w.status == 200 && l.ResourceID != aliceUser.ID {
			t.Errorf("record %s: got resource id %q, want alice's %s", w, l.ResourceID, aliceUser.ID)
		}
	}
	loginLogs := auditLogs(t, owner, "action:login")
	requireAudit(t, loginLogs, auditWant{actor: "anonymous", action: codersdk.AuditActionLogin, resourceType: codersdk.AuditResourceUser,
		target: "alice@example.com", status: 403, fields: map[string]any{"error": "Your account is suspended; ask an owner to activate it"}})
}
