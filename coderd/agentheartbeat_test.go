package coderd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/google/uuid"
	"github.com/hashicorp/yamux"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
	"airgapcoder/relayconn"
)

// TestAgentHeartbeat: one tick of the replica's heartbeat (a quartz mock
// clock steps it) records every connected agent alive at the tick's time,
// and moves an agent whose token a newer build gave a new row to that row:
// the new row is connected and users reach the agent by its new id (over
// a stream of its session or a spare connection its token opens), while
// the old row's last heartbeat stays behind.
func TestAgentHeartbeat(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dbURL := coderdtest.NewDatabase(t)
	db := coderdtest.OpenDatabase(t, dbURL)
	ps := coderdtest.RunPubsub(t, dbURL)

	clock := quartz.NewMock(t)
	clock.Set(time.Now().UTC().Truncate(time.Second)) // tokens and sessions expire on this clock
	const interval = time.Second
	srv := httptest.NewUnstartedServer(nil)
	u, _ := url.Parse("http://" + srv.Listener.Addr().String())
	api, err := coderd.New(ctx, coderd.Options{DB: db, Pubsub: ps, Logger: log, AccessURL: u, ProvisionerPSK: "psk",
		Clock: clock, AgentHeartbeatInterval: interval, RateLimits: coderd.RateLimits{API: -1}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = api
	srv.Start()
	trap := clock.Trap().TickerFunc("coderd", "agent", "heartbeat")
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = api.Run(runCtx) }()
	t.Cleanup(func() {
		api.Shutdown()
		srv.CloseClientConnections()
		srv.Close()
		stopRun()
		<-runDone
	})
	trap.MustWait(ctx).MustRelease(ctx)
	trap.Close()

	client := codersdk.New(u)
	if _, err := client.CreateFirstUser(ctx, codersdk.CreateFirstUserRequest{Email: "admin@example.com", Username: "admin", Password: coderdtest.FirstUserPassword}); err != nil {
		t.Fatal(err)
	}
	login, err := client.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "admin@example.com", Password: coderdtest.FirstUserPassword})
	if err != nil {
		t.Fatal(err)
	}
	client.SessionToken = login.SessionToken
	psk := codersdk.New(u)
	psk.ProvisionerPSK = "psk"
	daemon := coderdtest.NewDaemon(t, psk, "test", nil)

	// Two workspaces, each with a connected agent (its session: a yamux
	// server over the agent's relay connection, as the agent runs).
	type agent struct {
		token, id string
		w         codersdk.Workspace
		mux       *yamux.Session
	}
	agents := make([]*agent, 2)
	for i := range agents {
		a := &agent{token: uuid.NewString()}
		a.w = coderdtest.CreateWorkspaceWithAgent(t, client, client, daemon, fmt.Sprintf("dev%d", i), codersdk.ProvisionedAgent{Token: a.token, Directory: t.TempDir()})
		a.id = coderdtest.WorkspaceAgent(t, a.w).ID
		ac := codersdk.New(u)
		ac.SessionToken = a.token
		conn, err := ac.ConnectAgent(ctx)
		if err != nil {
			t.Fatalf("connect agent %d: %v", i, err)
		}
		cfg := yamux.DefaultConfig()
		cfg.LogOutput = io.Discard
		if a.mux, err = yamux.Server(conn, cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.mux.Close() })
		agents[i] = a
	}
	connectedAt := clock.Now()
	lastConnected := func(id string) (time.Time, string) {
		got, err := db.AgentByID(ctx, id)
		if err != nil {
			return time.Time{}, err.Error()
		}
		if got.LastConnectedAt == nil || got.DisconnectedAt != nil {
			return time.Time{}, fmt.Sprintf("agent %s: last connected %v, disconnected %v", id, got.LastConnectedAt, got.DisconnectedAt)
		}
		return got.LastConnectedAt.UTC(), ""
	}
	for _, a := range agents {
		testwait.For(t, 15*time.Second, "agent "+a.id+" connected", func() (bool, string) {
			at, why := lastConnected(a.id)
			return at.Equal(connectedAt), why
		})
	}

	// One tick: both agents are alive at its time.
	clock.Advance(interval).MustWait(ctx)
	beat := clock.Now()
	for _, a := range agents {
		if at, why := lastConnected(a.id); !at.Equal(beat) {
			t.Errorf("agent %s after a heartbeat: last connected %v (%s), want %v", a.id, at, why, beat)
		}
	}

	// A new build of the first workspace gives its token a new row; the
	// next tick moves the session to it.
	first := agents[0]
	if _, err := client.CreateWorkspaceBuild(ctx, first.w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart}); err != nil {
		t.Fatal(err)
	}
	daemon.CompleteNext(t, codersdk.CompleteJobRequest{
		State: []byte(`{"build":2}`),
		Resources: []codersdk.ProvisionedResource{{Type: "terraform_data", Name: "workspace", Agents: []codersdk.ProvisionedAgent{{
			Name: "main", OperatingSystem: "linux", Architecture: "amd64", Token: first.token, Directory: t.TempDir(),
		}}}},
	})
	w, err := client.Workspace(ctx, first.w.ID)
	if err != nil {
		t.Fatal(err)
	}
	newID := coderdtest.WorkspaceAgent(t, w).ID
	if newID == first.id {
		t.Fatal("the new build kept the agent's id")
	}
	clock.Advance(interval).MustWait(ctx)
	moved := clock.Now()
	if at, why := lastConnected(newID); !at.Equal(moved) {
		t.Errorf("the new build's agent after a heartbeat: last connected %v (%s), want %v", at, why, moved)
	}
	if at, _ := lastConnected(first.id); !at.Equal(beat) {
		t.Errorf("the old build's agent after the move: last connected %v, want the heartbeat before, %v", at, beat)
	}
	if at, why := lastConnected(agents[1].id); !at.Equal(moved) {
		t.Errorf("the other agent: last connected %v (%s), want %v", at, why, moved)
	}
	if got, err := client.WorkspaceAgent(ctx, newID); err != nil || got.Status != codersdk.AgentStatusConnected {
		t.Errorf("the new build's agent: got status %q (%v), want %s", got.Status, err, codersdk.AgentStatusConnected)
	}

	// A user's connection to the new id reaches the moved session.
	dialed := make(chan error, 1)
	go func() {
		conn, err := client.DialWorkspaceAgent(ctx, newID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: 8080})
		if err == nil {
			_ = conn.Close()
		}
		dialed <- err
	}()
	stream, err := first.mux.AcceptStream()
	if err != nil {
		t.Fatalf("accept the user's stream on the moved session: %v", err)
	}
	var hdr codersdk.RelayHeader
	if err := relayconn.ReadFrame(stream, &hdr); err != nil {
		t.Fatalf("read the user's connection request: %v", err)
	}
	if hdr.Kind != codersdk.RelayKindTCP || hdr.Port != 8080 || hdr.User != "admin" {
		t.Errorf("connection request on the moved session: got %+v, want tcp port 8080 for admin", hdr)
	}
	if err := relayconn.WriteFrame(stream, codersdk.RelayReply{}); err != nil {
		t.Fatal(err)
	}
	if err := <-dialed; err != nil {
		t.Errorf("dial the new build's agent: %v", err)
	}
	_ = stream.Close()

	// The moved session's spare connections, which its token authenticates,
	// carry the next user connection; a token no session or row has gets
	// none.
	ac := codersdk.New(u)
	ac.SessionToken = first.token
	spare, err := ac.ConnectAgentSpare(ctx)
	if err != nil {
		t.Fatalf("a spare connection of the moved session: %v", err)
	}
	defer spare.Close()
	go func() {
		conn, err := client.DialWorkspaceAgent(ctx, newID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: 8081})
		if err == nil {
			_ = conn.Close()
		}
		dialed <- err
	}()
	_ = spare.SetDeadline(time.Now().Add(15 * time.Second))
	if err := relayconn.ReadFrame(spare, &hdr); err != nil {
		t.Fatalf("read the user's connection request on the spare: %v", err)
	}
	if hdr.Port != 8081 {
		t.Errorf("connection request on the spare: got %+v, want port 8081", hdr)
	}
	if err := relayconn.WriteFrame(spare, codersdk.RelayReply{}); err != nil {
		t.Fatal(err)
	}
	if err := <-dialed; err != nil {
		t.Errorf("dial the new build's agent over a spare: %v", err)
	}
	ac.SessionToken = uuid.NewString()
	if _, err := ac.ConnectAgentSpare(ctx); !codersdk.IsStatus(err, http.StatusUnauthorized) {
		t.Errorf("a spare with an unknown token: got %v, want 401", err)
	}
}

// TestAgentConnectBurst: agents that connect at the same moment (their
// records are written in batches) are all connected, and all disconnected
// once their connections end.
func TestAgentConnectBurst(t *testing.T) {
	t.Parallel()
	const n = 12
	d, owner, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{}, "test")
	ids, tokens := make([]string, n), make([]string, n)
	for i := range n {
		tokens[i] = uuid.NewString()
		w := coderdtest.CreateWorkspaceWithAgent(t, owner, owner, daemon, fmt.Sprintf("dev%d", i), codersdk.ProvisionedAgent{Token: tokens[i], Directory: t.TempDir()})
		ids[i] = coderdtest.WorkspaceAgent(t, w).ID
	}
	ctx := context.Background()
	conns := make(chan error, n)
	muxes := make([]*yamux.Session, n)
	for i := range n {
		go func() {
			ac := d.Client()
			ac.SessionToken = tokens[i]
			conn, err := ac.ConnectAgent(ctx)
			if err == nil {
				cfg := yamux.DefaultConfig()
				cfg.LogOutput = io.Discard
				muxes[i], err = yamux.Server(conn, cfg)
			}
			conns <- err
		}()
	}
	for range n {
		if err := <-conns; err != nil {
			t.Fatalf("connect an agent: %v", err)
		}
	}
	status := func(want string) {
		t.Helper()
		testwait.For(t, 15*time.Second, fmt.Sprintf("%d agents %s", n, want), func() (bool, string) {
			for _, id := range ids {
				a, err := owner.WorkspaceAgent(ctx, id)
				if err != nil {
					return false, err.Error()
				}
				if a.Status != want {
					return false, fmt.Sprintf("agent %s is %s", id, a.Status)
				}
			}
			return true, ""
		})
	}
	status(codersdk.AgentStatusConnected)
	for _, m := range muxes {
		_ = m.Close()
	}
	status(codersdk.AgentStatusDisconnected)
}
