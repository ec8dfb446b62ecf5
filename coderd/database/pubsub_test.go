package database_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
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
	ps := database.NewPubsub(url, slog.New(slog.DiscardHandler), database.Channels...)
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
