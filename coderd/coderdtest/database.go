package coderdtest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"airgapcoder/coderd/database"
)

// OpenDatabase opens the database at url (NewDatabase's) and migrates it to
// the current schema, for tests that use the database without a
// deployment. It is closed when the test ends.
func OpenDatabase(t testing.TB, url string) *database.DB {
	t.Helper()
	ctx := context.Background()
	db, err := database.Open(ctx, url)
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(db.Close)
	if err := db.Migrate(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("migrate test database: %v", err)
	}
	return db
}

// RunPubsub runs a pubsub on the database at url listening on channels
// (database.Channels when none are given), as a replica's, until the test
// ends, reconnecting on the real clock. It returns once the pubsub listens.
func RunPubsub(t testing.TB, url string, channels ...string) *database.Pubsub {
	t.Helper()
	if len(channels) == 0 {
		channels = database.Channels
	}
	ps := database.NewPubsub(url, slog.New(slog.DiscardHandler), nil, channels...)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = ps.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-ps.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the test pubsub did not listen within 30s")
	}
	return ps
}
