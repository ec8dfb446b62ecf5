package coderd_test

import (
	"context"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
)

// TestFirstUserHookEndsWithTheServer: the first-user hook runs on a
// context the API owns, not the request's: it outlives the request that
// started it, and a server that stops cancels it and waits for it, so a
// template push never runs on behind a shutdown.
func TestFirstUserHookEndsWithTheServer(t *testing.T) {
	started, canceled, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	d := coderdtest.New(t, coderdtest.Options{OnFirstUser: func(ctx context.Context, username, token string) {
		close(started)
		<-ctx.Done()
		close(canceled)
		time.Sleep(200 * time.Millisecond) // the hook's own work after the cancel, which the server must wait for
		close(returned)
	}})
	d.CreateFirstUser(t)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the hook did not start")
	}
	select {
	case <-canceled:
		t.Fatal("the hook's context ended with the first user's request")
	case <-time.After(500 * time.Millisecond):
	}
	d.Close()
	select {
	case <-returned:
	default:
		t.Fatal("the server stopped before the hook returned")
	}
}
