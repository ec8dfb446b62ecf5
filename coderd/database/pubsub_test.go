package database_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
	"airgapcoder/internal/syncbuf"
)

// TestAuthChangedNotifications: the database itself announces every change
// of who may do what on ChannelAuthChanged, with the user's id, when it
// commits (migration 000007), and nothing else: a user's status and roles,
// an API key's removal, but not a login's bookkeeping. Listening says
// whether a subscriber can rely on hearing them.
func TestAuthChangedNotifications(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := coderdtest.NewDatabase(t)
	db := coderdtest.OpenDatabase(t, url)
	if _, err := db.EnsureDefaultOrganization(ctx); err != nil {
		t.Fatal(err)
	}
	ps := database.NewPubsub(url, slog.New(slog.DiscardHandler), nil, database.Channels...)
	if ps.Listening() {
		t.Fatal("Listening before Run")
	}
	got := make(chan string, 16)
	ps.Subscribe(database.ChannelAuthChanged, func(id string) {
		if id != "" { // "": the listener (re)connected
			got <- id
		}
	})
	done := make(chan struct{})
	go func() { defer close(done); _ = ps.Run(ctx) }()
	<-ps.Ready()
	if !ps.Listening() {
		t.Fatal("not Listening once Ready")
	}

	u, err := db.InsertUser(ctx, database.InsertUserParams{Email: "a@example.com", Username: "alice", HashedPassword: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	key := database.APIKey{ID: "abcdefghij", HashedSecret: []byte("s"), UserID: u.ID, LoginType: "password",
		LifetimeSeconds: 3600, ExpiresAt: now.Add(time.Hour), CreatedAt: now, LastUsed: now}
	if _, err := db.InsertAPIKey(ctx, key); err != nil {
		t.Fatal(err)
	}
	expect := func(what string) {
		t.Helper()
		select {
		case id := <-got:
			if id != u.ID {
				t.Fatalf("%s: announced %q, want the user %s", what, id, u.ID)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no announcement", what)
		}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case id := <-got:
			t.Fatalf("%s: announced %q, want nothing", what, id)
		case <-time.After(300 * time.Millisecond):
		}
	}
	// A login's bookkeeping is no change of who may do what.
	if err := db.TouchUser(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	if err := db.TouchAPIKey(ctx, key.ID, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	quiet("a user and a key used")
	if _, err := db.UpdateUserStatus(ctx, u.ID, database.UserStatusSuspended); err != nil {
		t.Fatal(err)
	}
	expect("suspended")
	if _, err := db.UpdateUserRoles(ctx, u.ID, []string{"owner"}); err != nil {
		t.Fatal(err)
	}
	expect("roles changed")
	if err := db.DeleteAPIKey(ctx, u.ID, key.ID); err != nil {
		t.Fatal(err)
	}
	expect("API key deleted")

	cancel()
	<-done
	if ps.Listening() {
		t.Error("Listening after Run returned")
	}
}

// TestPubsubReconnects: when its connection drops, the pubsub stops
// Listening, waits its backoff (100 ms, on its clock) and not 1 ms less,
// then listens again, tells every subscriber to look again (an empty
// payload) and delivers notifications as before.
func TestPubsubReconnects(t *testing.T) {
	t.Parallel()
	url := coderdtest.NewDatabase(t)
	db := coderdtest.OpenDatabase(t, url)
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	trap := clock.Trap().NewTimer("pubsub", "reconnect")
	defer trap.Close()
	logs := &syncbuf.Buffer{}
	ps := database.NewPubsub(url, slog.New(slog.NewTextHandler(logs, nil)), clock, database.ChannelJobPosted)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pubsub logs:\n%s", logs)
		}
	})
	got := make(chan string, 16)
	ps.Subscribe(database.ChannelJobPosted, func(payload string) { got <- payload })
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = ps.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	expect := func(what, want string) {
		t.Helper()
		select {
		case p := <-got:
			if p != want {
				t.Fatalf("%s: got %q, want %q", what, p, want)
			}
		case <-ctx.Done():
			t.Fatalf("%s: nothing delivered", what)
		}
	}
	expect("first connection", "")

	// Drop the pubsub's connection as a restarted or failed-over server would.
	var dropped int
	if err := db.Pool().QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'`).Scan(&dropped); err != nil {
		t.Fatal(err)
	}
	if dropped != 1 {
		t.Fatalf("terminated %d listening connections, want 1", dropped)
	}
	call, err := trap.Wait(ctx)
	if err != nil {
		t.Fatalf("no reconnect backoff after the connection dropped: %v", err)
	}
	call.MustRelease(ctx)
	if call.Duration != 100*time.Millisecond {
		t.Errorf("reconnect backoff %s, want 100ms", call.Duration)
	}
	if ps.Listening() {
		t.Error("Listening while the connection is down")
	}
	coderdtest.AdvanceClock(ctx, t, clock, call.Duration-time.Millisecond)
	if ps.Listening() {
		t.Fatal("reconnected 1 ms before the backoff ended")
	}
	coderdtest.AdvanceClock(ctx, t, clock, time.Millisecond)
	expect("reconnected", "")
	if !ps.Listening() {
		t.Error("not Listening after telling subscribers it reconnected")
	}
	if err := db.Notify(ctx, database.ChannelJobPosted, "job-1"); err != nil {
		t.Fatal(err)
	}
	expect("after reconnecting", "job-1")
}
