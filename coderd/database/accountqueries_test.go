package database_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd/database"
)

// TestUserQueries runs every query of users, API keys, organizations,
// SSH keys and user links once against the migrated schema. Rows are
// mapped onto structs by column name, so a column that a query selects and
// its struct lacks (or the reverse) fails here, not in production.
func TestUserQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openQueryDB(t)

	org, err := db.EnsureDefaultOrganization(ctx)
	must(t, "ensure default organization", err)
	if again, err := db.DefaultOrganization(ctx); err != nil || again != org || !org.IsDefault || org.Name != "coder" {
		t.Fatalf("default organization: got %+v (%v), want %+v, the default named coder", again, err, org)
	}

	alice, err := db.InsertFirstUser(ctx, database.InsertUserParams{Email: "alice@example.com", Username: "alice", Name: "Alice",
		HashedPassword: []byte("hash"), Roles: []string{"owner"}})
	must(t, "insert first user", err)
	if alice.Status != database.UserStatusActive || !slices.Equal(alice.Roles, []string{"owner"}) || alice.CreatedAt.IsZero() {
		t.Fatalf("first user: got %+v, want an active owner", alice)
	}
	if _, err := db.InsertFirstUser(ctx, database.InsertUserParams{Email: "x@example.com", Username: "x"}); !errors.Is(err, database.ErrFirstUserExists) {
		t.Fatalf("second first user: got %v, want ErrFirstUserExists", err)
	}
	bob, err := db.InsertUser(ctx, database.InsertUserParams{Email: "bob@example.com", Username: "bob", HashedPassword: []byte{}})
	must(t, "insert user", err)
	if _, err := db.InsertUser(ctx, database.InsertUserParams{Email: "BOB@example.com", Username: "bob2", HashedPassword: []byte{}}); !errors.Is(err, database.ErrConflict) {
		t.Fatalf("user with a taken email: got %v, want ErrConflict", err)
	}
	if n, err := db.CountUsers(ctx); err != nil || n != 2 {
		t.Fatalf("count users: got %d (%v), want 2", n, err)
	}
	if got, err := db.UserByID(ctx, bob.ID); err != nil || got.Username != "bob" || got.Roles == nil {
		t.Fatalf("user by id: got %+v (%v), want bob with empty roles", got, err)
	}
	if _, err := db.UserByID(ctx, uuid.NewString()); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("unknown user: got %v, want ErrNotFound", err)
	}
	if got, err := db.UserByEmailOrUsername(ctx, "", "ALICE"); err != nil || got.ID != alice.ID {
		t.Fatalf("user by username: got %+v (%v), want alice", got, err)
	}
	if users, err := db.Users(ctx); err != nil || len(users) != 2 || users[0].ID != alice.ID || users[1].ID != bob.ID {
		t.Fatalf("users: got %+v (%v), want alice, bob", users, err)
	}
	if got, err := db.UpdateUserRoles(ctx, bob.ID, []string{"template-admin"}); err != nil || !slices.Equal(got.Roles, []string{"template-admin"}) {
		t.Fatalf("update roles: got %+v (%v), want template-admin", got, err)
	}
	if got, err := db.UpdateUserProfile(ctx, bob.ID, "robert", "Robert"); err != nil || got.Username != "robert" || got.Name != "Robert" {
		t.Fatalf("update profile: got %+v (%v), want robert", got, err)
	}
	if got, err := db.UpdateUserStatus(ctx, bob.ID, database.UserStatusSuspended); err != nil || got.Status != database.UserStatusSuspended {
		t.Fatalf("update status: got %+v (%v), want suspended", got, err)
	}
	must(t, "touch user", db.TouchUser(ctx, bob.ID))
	must(t, "lock active owners", db.InTx(ctx, func(tx *database.DB) error {
		ids, err := tx.LockActiveOwners(ctx)
		if err == nil && !slices.Equal(ids, []string{alice.ID}) {
			t.Errorf("active owners: got %v, want [%s]", ids, alice.ID)
		}
		return err
	}))

	// API keys.
	expires := db.Now().Add(time.Hour)
	key, err := db.InsertAPIKey(ctx, database.APIKey{ID: "key1", HashedSecret: []byte("s"), UserID: alice.ID, LoginType: "password",
		LifetimeSeconds: 3600, ExpiresAt: expires})
	must(t, "insert api key", err)
	if !key.ExpiresAt.Equal(expires) || key.LastUsed != key.CreatedAt {
		t.Fatalf("inserted key: got %+v, want one expiring at %v, last used when created", key, expires)
	}
	k, u, deleted, err := db.APIKeyWithUser(ctx, "key1")
	if err != nil || k.ID != "key1" || k.UserID != alice.ID || u.ID != alice.ID || u.Username != "alice" || !u.CreatedAt.Equal(alice.CreatedAt) || deleted {
		t.Fatalf("api key with user: got %+v, %+v, deleted %v (%v), want key1 of alice", k, u, deleted, err)
	}
	if _, _, _, err := db.APIKeyWithUser(ctx, "nope"); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("unknown api key: got %v, want ErrNotFound", err)
	}
	must(t, "touch api key", db.TouchAPIKey(ctx, "key1", db.Now()))
	token := database.APIKey{ID: "tok1", HashedSecret: []byte("t"), UserID: alice.ID, LoginType: "token", TokenName: "ci", LifetimeSeconds: 60, ExpiresAt: expires}
	_, err = db.InsertAPIKey(ctx, token)
	must(t, "insert token", err)
	token.ID = "tok2"
	if got, err := db.ReplaceAPIKeyByName(ctx, token); err != nil || got.ID != "tok2" {
		t.Fatalf("replace token: got %+v (%v), want tok2", got, err)
	}
	if keys, err := db.APIKeysByUser(ctx, alice.ID, "token"); err != nil || len(keys) != 1 || keys[0].ID != "tok2" || keys[0].TokenName != "ci" {
		t.Fatalf("tokens: got %+v (%v), want tok2 alone", keys, err)
	}
	must(t, "delete token by name", db.DeleteAPIKeyByName(ctx, alice.ID, "ci"))
	if err := db.DeleteAPIKey(ctx, alice.ID, "tok2"); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("delete a deleted token: got %v, want ErrNotFound", err)
	}
	if n, err := db.DeleteAPIKeysByUser(ctx, alice.ID); err != nil || n != 1 {
		t.Fatalf("delete alice's keys: got %d (%v), want 1", n, err)
	}

	// SSH keys: the first call stores the pair gen makes, later ones read it.
	gen := func() (string, string, error) { return "ssh-ed25519 AAAA", "PRIVATE", nil }
	ssh, err := db.SSHKeyByUser(ctx, alice.ID, gen)
	must(t, "ssh key", err)
	again, err := db.SSHKeyByUser(ctx, alice.ID, func() (string, string, error) { return "", "", errors.New("called twice") })
	if err != nil || again != ssh || ssh.PublicKey != "ssh-ed25519 AAAA" || ssh.UserID != alice.ID {
		t.Fatalf("ssh key again: got %+v (%v), want %+v", again, err, ssh)
	}

	// User links.
	if _, err := db.UserLinkByUser(ctx, bob.ID); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("link of an unlinked user: got %v, want ErrNotFound", err)
	}
	link, err := db.UpsertUserLink(ctx, database.UserLink{UserID: bob.ID, LoginType: "oidc", Issuer: "https://idp", Subject: "sub-bob"})
	must(t, "upsert user link", err)
	if !link.OAuthExpiry.IsZero() || link.OAuthRefreshToken != "" {
		t.Fatalf("new link: got %+v, want no token", link)
	}
	if lt, err := db.UserLoginType(ctx, bob.ID); err != nil || lt != "oidc" {
		t.Fatalf("login type: got %q (%v), want oidc", lt, err)
	}
	tokenExpiry := db.Now().Add(time.Hour)
	must(t, "update link token", db.UpdateUserLinkToken(ctx, bob.ID, "sealed", tokenExpiry))
	if got, err := db.UserLinkBySubject(ctx, "https://idp", "sub-bob"); err != nil || got.UserID != bob.ID || got.OAuthRefreshToken != "sealed" || !got.OAuthExpiry.Equal(tokenExpiry) {
		t.Fatalf("link by subject: got %+v (%v), want bob's with its token", got, err)
	}
	if got, err := db.UserLinkByUser(ctx, bob.ID); err != nil || got.Subject != "sub-bob" {
		t.Fatalf("link by user: got %+v (%v), want sub-bob", got, err)
	}
	if _, err := db.UpsertUserLink(ctx, database.UserLink{UserID: alice.ID, LoginType: "oidc", Issuer: "https://idp", Subject: "sub-bob"}); !errors.Is(err, database.ErrConflict) {
		t.Fatalf("link another user's account: got %v, want ErrConflict", err)
	}

	// Deleting a user frees its name and ends its keys.
	_, err = db.InsertAPIKey(ctx, database.APIKey{ID: "key2", HashedSecret: []byte("s"), UserID: bob.ID, LoginType: "password", ExpiresAt: expires})
	must(t, "insert bob's key", err)
	must(t, "delete user", db.DeleteUser(ctx, bob.ID))
	if err := db.DeleteUser(ctx, bob.ID); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("delete a deleted user: got %v, want ErrNotFound", err)
	}
	if _, _, _, err := db.APIKeyWithUser(ctx, "key2"); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("deleted user's key: got %v, want ErrNotFound", err)
	}
}

// TestGroupQueries runs every query of groups, template ACLs, quotas,
// external auth links, files and the admin operations once against the
// migrated schema (see TestUserQueries).
func TestGroupQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openQueryDB(t)

	org, err := db.EnsureDefaultOrganization(ctx)
	must(t, "ensure default organization", err)
	alice, err := db.InsertUser(ctx, database.InsertUserParams{Email: "alice@example.com", Username: "alice", HashedPassword: []byte{}})
	must(t, "insert user", err)

	// Files.
	file, err := db.InsertFile(ctx, database.File{Hash: "h1", CreatedBy: alice.ID, Mimetype: "application/x-tar", Data: []byte("tar")})
	must(t, "insert file", err)
	if got, err := db.FileByHash(ctx, "h1", alice.ID); err != nil || got.ID != file.ID || got.Data != nil || got.Mimetype != "application/x-tar" {
		t.Fatalf("file by hash: got %+v (%v), want %s without data", got, err, file.ID)
	}
	if got, err := db.FileByID(ctx, file.ID); err != nil || string(got.Data) != "tar" || !got.CreatedAt.Equal(file.CreatedAt) {
		t.Fatalf("file by id: got %+v (%v), want its data", got, err)
	}
	if _, err := db.FileByID(ctx, uuid.NewString()); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("unknown file: got %v, want ErrNotFound", err)
	}

	// A template with a version whose import found one resource costing
	// 5 a day, and a workspace whose latest build starts it.
	job, build, tmpl, version, ws, resource := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	buildJob := uuid.NewString()
	seed(t, db.Pool(),
		row{`INSERT INTO provisioner_jobs (id, created_at, updated_at, organization_id, initiator_id, type, input, tags, file_id)
			VALUES ($1, now(), now(), $2, $3, 'template_version_import', '{}', '{}', $4), ($5, now(), now(), $2, $3, 'workspace_build', '{}', '{}', $4)`,
			[]any{job, org.ID, alice.ID, file.ID, buildJob}},
		row{`INSERT INTO templates (id, organization_id, name, active_version_id, created_by, created_at, updated_at) VALUES ($1, $2, 'docker', $3, $4, now(), now())`,
			[]any{tmpl, org.ID, version, alice.ID}},
		row{`INSERT INTO template_versions (id, template_id, organization_id, name, job_id, created_by, created_at, updated_at)
			VALUES ($1, $2, $3, 'v1', $4, $5, now(), now())`, []any{version, tmpl, org.ID, job, alice.ID}},
		row{`INSERT INTO workspace_resources (id, job_id, transition, type, name, created_at, daily_cost) VALUES ($1, $2, 'start', 'docker_container', 'dev', now(), 5)`,
			[]any{resource, job}},
		row{`INSERT INTO workspaces (id, organization_id, owner_id, template_id, name, created_at, updated_at) VALUES ($1, $2, $3, $4, 'dev', now(), now())`,
			[]any{ws, org.ID, alice.ID, tmpl}},
		row{`INSERT INTO workspace_builds (id, workspace_id, template_version_id, build_number, transition, initiator_id, job_id, created_at, updated_at)
			VALUES ($1, $2, $3, 1, 'start', $4, $5, now(), now())`, []any{build, ws, version, alice.ID, buildJob}},
	)

	// Groups.
	devs, err := db.InsertGroup(ctx, database.Group{OrganizationID: org.ID, Name: "devs", DisplayName: "Developers"})
	must(t, "insert group", err)
	if devs.Source != database.GroupSourceUser || devs.OrganizationID != org.ID {
		t.Fatalf("inserted group: got %+v, want a user group of %s", devs, org.ID)
	}
	if _, err := db.InsertGroup(ctx, database.Group{OrganizationID: org.ID, Name: "DEVS"}); !errors.Is(err, database.ErrConflict) {
		t.Fatalf("group with a taken name: got %v, want ErrConflict", err)
	}
	if got, err := db.GroupByID(ctx, devs.ID); err != nil || got != devs {
		t.Fatalf("group by id: got %+v (%v), want %+v", got, err, devs)
	}
	if got, err := db.GroupByName(ctx, org.ID, "Devs"); err != nil || got.ID != devs.ID {
		t.Fatalf("group by name: got %+v (%v), want devs", got, err)
	}
	devs, err = db.UpdateGroup(ctx, devs.ID, "developers", "Devs")
	must(t, "update group", err)
	ops, created, err := db.EnsureGroup(ctx, org.ID, "ops", database.GroupSourceOIDC)
	if err != nil || !created || ops.Source != database.GroupSourceOIDC {
		t.Fatalf("ensure new group: got %+v, created %v (%v), want a new oidc group", ops, created, err)
	}
	if got, created, err := db.EnsureGroup(ctx, org.ID, "OPS", database.GroupSourceUser); err != nil || created || got.ID != ops.ID {
		t.Fatalf("ensure existing group: got %+v, created %v (%v), want ops", got, created, err)
	}
	if groups, err := db.Groups(ctx, org.ID); err != nil || len(groups) != 2 || groups[0].Name != "developers" || groups[1].Name != "ops" {
		t.Fatalf("groups: got %+v (%v), want developers, ops", groups, err)
	}
	if added, err := db.AddGroupMember(ctx, devs.ID, alice.ID, database.GroupSourceUser); err != nil || !added {
		t.Fatalf("add member: got %v (%v), want added", added, err)
	}
	if added, err := db.AddGroupMember(ctx, ops.ID, alice.ID, database.GroupSourceOIDC); err != nil || !added {
		t.Fatalf("add member: got %v (%v), want added", added, err)
	}
	members, err := db.GroupMembers(ctx, []string{devs.ID, ops.ID})
	if err != nil || len(members[devs.ID]) != 1 || members[devs.ID][0].ID != alice.ID || members[devs.ID][0].Username != "alice" ||
		members[ops.ID][0].Source != database.GroupSourceOIDC {
		t.Fatalf("group members: got %+v (%v), want alice in both, by oidc in ops", members, err)
	}
	mine, err := db.GroupsOfUser(ctx, alice.ID)
	if err != nil || len(mine) != 2 || mine[0].ID != devs.ID || mine[0].MemberSource != database.GroupSourceUser ||
		mine[1].Source != database.GroupSourceOIDC || mine[1].MemberSource != database.GroupSourceOIDC {
		t.Fatalf("groups of user: got %+v (%v), want developers (by a user) and ops (by oidc)", mine, err)
	}
	if removed, err := db.RemoveGroupMember(ctx, ops.ID, alice.ID); err != nil || !removed {
		t.Fatalf("remove member: got %v (%v), want removed", removed, err)
	}

	// Template ACLs.
	acl := database.TemplateACL{Users: map[string]string{alice.ID: "admin"}, Groups: map[string]string{devs.ID: "use", ops.ID: "use"}}
	must(t, "update template acl", db.UpdateTemplateACL(ctx, tmpl, acl))
	must(t, "delete group", db.DeleteGroup(ctx, ops.ID))
	if err := db.DeleteGroup(ctx, ops.ID); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("delete a deleted group: got %v, want ErrNotFound", err)
	}
	if got, err := db.TemplateACLByID(ctx, tmpl); err != nil || got.Users[alice.ID] != "admin" || got.Groups[devs.ID] != "use" || len(got.Groups) != 1 {
		t.Fatalf("template acl: got %+v (%v), want alice admin, devs use (ops gone with its group)", got, err)
	}

	// Quotas.
	if q, err := db.WorkspaceQuota(ctx, org.ID, alice.ID, ""); err != nil || q != (database.Quota{Budget: 0, Consumed: 5, Enforced: false}) {
		t.Fatalf("quota without allowances: got %+v (%v), want 5 consumed, not enforced", q, err)
	}
	must(t, "set group allowance", db.SetQuotaAllowance(ctx, org.ID, devs.ID, 10))
	must(t, "set everyone allowance", db.SetQuotaAllowance(ctx, org.ID, org.ID, 3))
	if err := db.SetQuotaAllowance(ctx, org.ID, uuid.NewString(), 1); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("allowance of an unknown group: got %v, want ErrNotFound", err)
	}
	if got, err := db.QuotaAllowances(ctx, org.ID); err != nil || len(got) != 2 || got[devs.ID] != 10 || got[org.ID] != 3 {
		t.Fatalf("quota allowances: got %v (%v), want devs 10, everyone 3", got, err)
	}
	must(t, "quota in a transaction", db.InTx(ctx, func(tx *database.DB) error {
		q, err := tx.WorkspaceQuota(ctx, org.ID, alice.ID, ws)
		if err == nil && q != (database.Quota{Budget: 13, Consumed: 0, Enforced: true}) {
			t.Errorf("quota without the workspace: got %+v, want budget 13, nothing consumed, enforced", q)
		}
		return err
	}))
	if cost, err := db.TemplateVersionDailyCost(ctx, version); err != nil || cost != 5 {
		t.Fatalf("daily cost: got %d (%v), want 5", cost, err)
	}

	// External auth links.
	if _, err := db.ExternalAuthLink(ctx, alice.ID, "github"); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("missing link: got %v, want ErrNotFound", err)
	}
	expiry := db.Now().Add(time.Hour)
	link, err := db.UpsertExternalAuthLink(ctx, database.ExternalAuthLink{UserID: alice.ID, ProviderID: "github", OAuthAccessToken: "a1",
		OAuthRefreshToken: "r1", OAuthExpiry: expiry})
	must(t, "upsert external auth link", err)
	if string(link.OAuthExtra) != "{}" || !link.OAuthExpiry.Equal(expiry) {
		t.Fatalf("new link: got %+v, want no extra, expiring at %v", link, expiry)
	}
	_, err = db.UpsertExternalAuthLink(ctx, database.ExternalAuthLink{UserID: alice.ID, ProviderID: "gitlab", OAuthAccessToken: "b1"})
	must(t, "upsert second link", err)
	if links, err := db.ExternalAuthLinksByUser(ctx, alice.ID); err != nil || len(links) != 2 || links[0].ProviderID != "github" || links[1].ProviderID != "gitlab" {
		t.Fatalf("links: got %+v (%v), want github, gitlab", links, err)
	}
	link.OAuthAccessToken, link.OAuthRefreshToken = "a2", "r2"
	if got, ok, err := db.UpdateExternalAuthLinkToken(ctx, link, "r1"); err != nil || !ok || got.OAuthAccessToken != "a2" {
		t.Fatalf("refresh: got %+v, %v (%v), want a2 stored", got, ok, err)
	}
	link.OAuthAccessToken = "a3"
	if got, ok, err := db.UpdateExternalAuthLinkToken(ctx, link, "r1"); err != nil || ok || got.OAuthAccessToken != "a2" {
		t.Fatalf("stale refresh: got %+v, %v (%v), want a2 kept", got, ok, err)
	}
	if got, err := db.ExternalAuthLink(ctx, alice.ID, "github"); err != nil || got.OAuthRefreshToken != "r2" {
		t.Fatalf("link: got %+v (%v), want r2", got, err)
	}
	if ok, err := db.DeleteExternalAuthLinkIfToken(ctx, alice.ID, "github", "a1"); err != nil || ok {
		t.Fatalf("delete with a stale token: got %v (%v), want kept", ok, err)
	}
	if ok, err := db.DeleteExternalAuthLinkIfToken(ctx, alice.ID, "github", "a2"); err != nil || !ok {
		t.Fatalf("delete with the token: got %v (%v), want deleted", ok, err)
	}
	must(t, "delete link", db.DeleteExternalAuthLink(ctx, alice.ID, "gitlab"))
	if err := db.DeleteExternalAuthLink(ctx, alice.ID, "gitlab"); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("delete a deleted link: got %v, want ErrNotFound", err)
	}
	must(t, "set version providers", db.SetTemplateVersionExternalAuthProviders(ctx, version, []byte(`[{"id":"github"}]`)))
	if got, err := db.TemplateVersionExternalAuthProviders(ctx, version); err != nil || string(got) != `[{"id": "github"}]` {
		t.Fatalf("version providers: got %s (%v), want github", got, err)
	}

	// Admin operations.
	if n, err := db.CountWorkspacesByOwner(ctx, alice.ID); err != nil || n != 1 {
		t.Fatalf("count workspaces: got %d (%v), want 1", n, err)
	}
	if got, err := db.TemplateVersionsInUse(ctx, tmpl); err != nil || len(got) != 1 || !got[version] {
		t.Fatalf("versions in use: got %v (%v), want %s", got, err, version)
	}
	must(t, "archive version", db.SetTemplateVersionArchived(ctx, version, true))
	if err := db.SetTemplateVersionArchived(ctx, uuid.NewString(), true); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("archive an unknown version: got %v, want ErrNotFound", err)
	}
}
