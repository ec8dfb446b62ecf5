package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd/database"
)

// TestOperationsQueries runs every query of the audit log, deployment
// values, replicas and the database diagnostics once against the migrated
// schema (see TestUserQueries).
func TestOperationsQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openQueryDB(t)

	// Audit log.
	if ok, err := db.HasAuditLog(ctx); err != nil || !ok {
		t.Fatalf("has audit log: got %v (%v), want true", ok, err)
	}
	alice, err := db.InsertUser(ctx, database.InsertUserParams{Email: "alice@example.com", Username: "alice", HashedPassword: []byte{}})
	must(t, "insert user", err)
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	login, err := db.InsertAuditLog(ctx, database.AuditLog{Action: "login", ResourceType: "api_key", ResourceTarget: "nobody@example.com",
		StatusCode: 401, Time: old})
	must(t, "insert anonymous audit log", err)
	if login.ID == "" || login.UserID != "" || login.IP != "" || string(login.AdditionalFields) != "{}" || !login.Time.Equal(old) {
		t.Fatalf("anonymous record: got %+v, want an id, no actor, no IP, empty fields", login)
	}
	create, err := db.InsertAuditLog(ctx, database.AuditLog{UserID: alice.ID, Username: "alice", IP: "192.0.2.1", Action: "create",
		ResourceType: "workspace", WorkspaceOwner: "alice", WorkspaceName: "dev", StatusCode: 201, Success: true,
		AdditionalFields: []byte(`{"a":1}`)})
	must(t, "insert audit log", err)
	if create.UserID != alice.ID || create.IP != "192.0.2.1" || create.Time.IsZero() {
		t.Fatalf("record: got %+v, want alice from 192.0.2.1", create)
	}
	imported := database.AuditLog{ID: uuid.NewString(), Time: old.Add(time.Hour), Action: "delete", ResourceType: "template", StatusCode: 204, Success: true}
	for i, want := range []bool{true, false} {
		if isNew, err := db.ImportAuditLog(ctx, imported); err != nil || isNew != want {
			t.Fatalf("import %d: got new %v (%v), want %v", i+1, isNew, err, want)
		}
	}
	logs, count, err := db.AuditLogs(ctx, database.AuditLogFilter{Limit: 2})
	if err != nil || count != 3 || len(logs) != 2 || logs[0].ID != create.ID || logs[1].ID != imported.ID {
		t.Fatalf("audit logs: got %d of %d (%v), want the newest 2 of 3", len(logs), count, err)
	}
	success := true
	logs, count, err = db.AuditLogs(ctx, database.AuditLogFilter{Username: "ALICE", Success: &success, WorkspaceName: "dev", WorkspaceOwner: "alice"})
	if err != nil || count != 1 || len(logs) != 1 || logs[0].ID != create.ID || string(logs[0].AdditionalFields) != `{"a": 1}` {
		t.Fatalf("alice's audit logs: got %+v, %d (%v), want the create", logs, count, err)
	}
	if logs, count, err = db.AuditLogs(ctx, database.AuditLogFilter{Offset: 10}); err != nil || count != 3 || len(logs) != 0 {
		t.Fatalf("page past the end: got %d of %d (%v), want none of 3", len(logs), count, err)
	}
	var each []string
	must(t, "each audit log", db.EachAuditLog(ctx, func(l database.AuditLog) error {
		each = append(each, l.Action)
		return nil
	}))
	if len(each) != 3 || each[0] != "login" || each[2] != "create" {
		t.Fatalf("each audit log: got %v, want login, delete, create", each)
	}
	if n, err := db.DeleteAuditLogsBefore(ctx, old.Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("delete old audit logs: got %d (%v), want 1", n, err)
	}

	// Deployment values.
	if v, err := db.DeploymentValue(ctx, "k", "initial"); err != nil || v != "initial" {
		t.Fatalf("deployment value: got %q (%v), want initial", v, err)
	}
	must(t, "set deployment value", db.SetDeploymentValue(ctx, "k", "one"))
	if prev, changed, err := db.SwapDeploymentValue(ctx, "k", "two"); err != nil || prev != "one" || !changed {
		t.Fatalf("swap: got %q, changed %v (%v), want one, changed", prev, changed, err)
	}
	if prev, changed, err := db.SwapDeploymentValue(ctx, "k", "two"); err != nil || prev != "two" || changed {
		t.Fatalf("swap to the same: got %q, changed %v (%v), want two, unchanged", prev, changed, err)
	}
	// SwapDeploymentValue locks the value in its transaction; outside one
	// the lock is refused.
	if _, err := db.LockDeploymentValue(ctx, "k"); err == nil {
		t.Fatal("lock outside a transaction: got no error")
	}

	// Replicas.
	r, err := db.UpsertReplica(ctx, database.Replica{ID: uuid.NewString(), Hostname: "host-a", RelayAddress: "http://10.0.0.1:8080", Version: "v1"})
	must(t, "upsert replica", err)
	r2, err := db.UpsertReplica(ctx, database.Replica{ID: r.ID, Hostname: "host-b", RelayAddress: r.RelayAddress, Version: "v2"})
	if err != nil || !r2.StartedAt.Equal(r.StartedAt) || r2.Hostname != "host-b" || r2.Version != "v2" {
		t.Fatalf("heartbeat: got %+v (%v), want host-b, v2, started at %v", r2, err, r.StartedAt)
	}
	if live, err := db.LiveReplicas(ctx, time.Minute); err != nil || len(live) != 1 || live[0].ID != r.ID {
		t.Fatalf("live replicas: got %+v (%v), want %s", live, err, r.ID)
	}
	if n, err := db.DeleteReplicasOlderThan(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("delete stale replicas: got %d (%v), want 0", n, err)
	}
	must(t, "delete replica", db.DeleteReplica(ctx, r.ID))
	if live, err := db.LiveReplicas(ctx, time.Minute); err != nil || len(live) != 0 {
		t.Fatalf("live replicas after delete: got %+v (%v), want none", live, err)
	}

	// Diagnostics.
	server, err := db.PostgresServer(ctx)
	if err != nil || server.ServerVersion == "" || server.DatabaseSize <= 0 || server.StartedAt.IsZero() || server.Connections == nil {
		t.Fatalf("postgres server: got %+v (%v), want a version, a size and connections", server, err)
	}
	settings, err := db.PostgresSettings(ctx)
	must(t, "postgres settings", err)
	found := false
	for _, s := range settings {
		found = found || s.Name == "max_connections" && s.Setting != ""
	}
	if !found {
		t.Fatalf("postgres settings: got %d settings without max_connections", len(settings))
	}
	tables, err := db.LargestTables(ctx, 3)
	if err != nil || len(tables) != 3 || tables[0].Schema != "public" || tables[0].TotalBytes < tables[2].TotalBytes {
		t.Fatalf("largest tables: got %+v (%v), want the 3 largest of public", tables, err)
	}
}
