package database_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/database"
)

// TestWorkspaceProxyColumns fails when the table gains a column the
// queries do not read (or the queries name one it lacks).
func TestWorkspaceProxyColumns(t *testing.T) {
	t.Parallel()
	db := openQueryDB(t)
	rows, err := db.Pool().Query(context.Background(), `SELECT column_name FROM information_schema.columns
		WHERE table_name = 'workspace_proxies' ORDER BY ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
	var table []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		table = append(table, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var queried []string
	for _, c := range strings.Split(database.WorkspaceProxyColumns, ",") {
		queried = append(queried, strings.TrimSpace(c))
	}
	if !slices.Equal(table, queried) {
		t.Fatalf("workspace_proxies columns: table has %v, queries read %v", table, queried)
	}
}

func TestWorkspaceProxyLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openQueryDB(t)
	hash := sha256.Sum256([]byte("secret"))
	p, err := db.InsertWorkspaceProxy(ctx, database.WorkspaceProxy{Name: "Eu", DisplayName: "Europe", TokenHashedSecret: hash[:]})
	if err != nil {
		t.Fatal(err)
	}
	if !p.LastHeartbeatAt.IsZero() || !p.RegisteredAt.IsZero() || string(p.HealthReport) != "{}" {
		t.Errorf("new proxy: got %+v, want never registered with an empty report", p)
	}
	if _, err := db.InsertWorkspaceProxy(ctx, database.WorkspaceProxy{Name: "eu", TokenHashedSecret: hash[:]}); !errors.Is(err, database.ErrConflict) {
		t.Errorf("second proxy named eu: got %v, want ErrConflict", err)
	}

	first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	reg := database.RegisterWorkspaceProxyParams{ID: p.ID, URL: "https://eu.example", Version: "v1", ReplicaID: "r1", Now: first}
	if p, err = db.RegisterWorkspaceProxy(ctx, reg); err != nil {
		t.Fatal(err)
	}
	reg.Now = first.Add(time.Minute)
	if p, err = db.RegisterWorkspaceProxy(ctx, reg); err != nil {
		t.Fatal(err)
	}
	if !p.RegisteredAt.Equal(first) || !p.LastHeartbeatAt.Equal(reg.Now) || p.URL != "https://eu.example" {
		t.Errorf("after two registrations: got registered %s, heartbeat %s, url %q; want %s, %s, https://eu.example",
			p.RegisteredAt, p.LastHeartbeatAt, p.URL, first, reg.Now)
	}

	// Only the replica that registered last deregisters the proxy.
	if ok, err := db.DeregisterWorkspaceProxy(ctx, p.ID, "r2", reg.Now); err != nil || ok {
		t.Errorf("deregister another replica: got %v, %v; want false", ok, err)
	}
	if ok, err := db.DeregisterWorkspaceProxy(ctx, p.ID, "r1", reg.Now); err != nil || !ok {
		t.Errorf("deregister: got %v, %v; want true", ok, err)
	}
	if p, err = db.WorkspaceProxyByName(ctx, "EU"); err != nil || p.DeregisteredAt.IsZero() {
		t.Errorf("by name after deregister: got %+v, %v; want deregistered", p, err)
	}

	// Deleted: gone from names and listings, kept by id, name free again.
	if _, err := db.DeleteWorkspaceProxy(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DeleteWorkspaceProxy(ctx, p.ID); !errors.Is(err, database.ErrNotFound) {
		t.Errorf("delete twice: got %v, want ErrNotFound", err)
	}
	if _, err := db.WorkspaceProxyByName(ctx, "eu"); !errors.Is(err, database.ErrNotFound) {
		t.Errorf("deleted by name: got %v, want ErrNotFound", err)
	}
	if got, err := db.WorkspaceProxyByID(ctx, p.ID); err != nil || !got.Deleted {
		t.Errorf("deleted by id: got %+v, %v; want the deleted row", got, err)
	}
	if _, err := db.RegisterWorkspaceProxy(ctx, reg); !errors.Is(err, database.ErrNotFound) {
		t.Errorf("register a deleted proxy: got %v, want ErrNotFound", err)
	}
	if _, err := db.InsertWorkspaceProxy(ctx, database.WorkspaceProxy{Name: "eu", TokenHashedSecret: hash[:]}); err != nil {
		t.Errorf("reuse a deleted proxy's name: %v", err)
	}
	if ps, err := db.WorkspaceProxies(ctx); err != nil || len(ps) != 1 || ps[0].ID == p.ID {
		t.Errorf("list: got %+v, %v; want only the new eu", ps, err)
	}
}
