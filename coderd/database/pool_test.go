package database_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
)

// TestPoolParametersInURL: an operator sizes the pool with pool_max_conns
// (and the other pool_* parameters pgxpool reads) in the database URL; the
// pool honours it and the pubsub's own connection, which is no pool,
// leaves them out instead of sending them to PostgreSQL.
func TestPoolParametersInURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := coderdtest.NewDatabase(t)
	if !strings.Contains(base, "?") {
		t.Fatalf("test database URL %s has no query to add to", base)
	}
	url := base + "&pool_max_conns=40&pool_min_conns=1&pool_max_conn_idle_time=1m"
	db, err := database.Open(ctx, url)
	if err != nil {
		t.Fatalf("open with pool parameters: %v", err)
	}
	defer db.Close()
	if got := db.Pool().Config().MaxConns; got != 40 {
		t.Errorf("pool size: got %d, want 40 (pool_max_conns)", got)
	}

	heard := listen(t, url, database.ChannelAgentConnection) // a URL with pool parameters
	if err := db.Notify(ctx, database.ChannelAgentConnection, "hello"); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-heard:
		if p != "hello" {
			t.Errorf("notification: got %q, want hello", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10s")
	}
}
