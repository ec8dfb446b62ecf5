package wsproxy_test

import (
	"fmt"
	"io"
	"net/url"
	"slices"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testwait"
)

// TestUserConnectionBookkeeping checks, against a fake primary, what a
// user's connection through the proxy to an agent elsewhere costs and
// leaves: one authorize-connect per token, agent and kind within the
// answer's ValidFor; an OpDial stream with the header the agent gets; the
// agent in the heartbeats' ActiveAgentIDs while it is open; and a record
// of each connection once it ends. The proxy runs on a mock clock: the
// heartbeats come when the test steps it, and the cached answer expires
// when the clock reaches its ValidFor.
func TestUserConnectionBookkeeping(t *testing.T) {
	t.Parallel()
	clock := coderdtest.NewClock(t)
	primary := newFakePrimary(t)
	primary.heartbeat = time.Second
	logs := &syncbuf.Buffer{}
	s, httpClient, _, _ := startProxy(t, primary, logs, clock)
	<-s.Ready()
	primary.waitRelaySessions(t, 1, "the relay session")
	u, _ := url.Parse("https://" + s.Addr().String())
	c := codersdk.New(u)
	c.HTTPClient = httpClient
	c.SessionToken = "alice-token"
	const agentID = "6e0c3f1a-0000-4000-8000-0000000000aa"
	ctx := coderdtest.ClockContext(t)
	start := clock.Now()

	dial := func(i int) io.ReadWriteCloser {
		t.Helper()
		conn, err := c.DialWorkspaceAgent(ctx, agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: 8080})
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		msg := fmt.Sprintf("connection %d", i)
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
			t.Fatalf("echo %d: got %q, %v; want %q", i, got, err, msg)
		}
		return conn
	}
	conns := []io.ReadWriteCloser{dial(0), dial(1)}
	active := func(want bool) func() bool {
		return func() bool {
			regs, _ := primary.state()
			last := regs[len(regs)-1]
			return slices.Equal(last.ActiveAgentIDs, []string{agentID}) == want
		}
	}
	primary.stepHeartbeat(ctx, t, clock)
	if !active(true)() {
		regs, _ := primary.state()
		t.Errorf("the heartbeat while two connections are open: got active agents %v, want [%s]", regs[len(regs)-1].ActiveAgentIDs, agentID)
	}

	primary.mu.Lock()
	authorized, dials := slices.Clone(primary.authorized), slices.Clone(primary.dials)
	primary.mu.Unlock()
	if len(authorized) != 1 || authorized[0].SessionToken != "alice-token" || authorized[0].AgentID != agentID || authorized[0].Kind != codersdk.RelayKindTCP || authorized[0].Port != 8080 {
		t.Errorf("authorize-connect calls: got %+v, want one for the token, agent, kind and port (the second answered from the cache)", authorized)
	}
	if len(dials) != 2 {
		t.Fatalf("OpDial streams: got %d, want 2", len(dials))
	}
	for _, d := range dials {
		if d.AgentID != agentID || d.Header.Kind != codersdk.RelayKindTCP || d.Header.Port != 8080 || d.Header.User != "alice" || d.Header.ConnID == "" {
			t.Errorf("OpDial request: got %+v, want agent %s, tcp 8080, user alice, a conn id", d, agentID)
		}
	}

	for _, conn := range conns {
		_ = conn.Close()
	}
	testwait.ForCtx(ctx, t, "two connection records", testwait.Bool(func() bool { primary.mu.Lock(); defer primary.mu.Unlock(); return len(primary.reports) == 2 }))
	// A connection counts as active until its handler returns, which may
	// be just after its record went out: each poll is the next heartbeat.
	testwait.ForCtx(ctx, t, "a heartbeat without active agents", testwait.Bool(func() bool {
		primary.stepHeartbeat(ctx, t, clock)
		return active(false)()
	}))
	primary.mu.Lock()
	reports := slices.Clone(primary.reports)
	primary.mu.Unlock()
	for i, r := range reports {
		if !slices.ContainsFunc(dials, func(d codersdk.ProxyRelayRequest) bool { return d.Header.ConnID == r.ConnID }) {
			t.Errorf("connection record %d: conn id %q is not one the agent got", i, r.ConnID)
		}
		if r.UserID != "user-id" || r.AgentID != agentID || r.Kind != codersdk.RelayKindTCP || r.Port != 8080 ||
			r.BytesUp != int64(len("connection 0")) || r.BytesDown != r.BytesUp || r.Error != "" || !r.StartedAt.Equal(start) || r.EndedAt.Before(r.StartedAt) || r.ConnID == "" {
			t.Errorf("connection record: got %+v, want the user, agent, tcp 8080, 12 bytes each way, no error, started at %s on the proxy's clock", r, start)
		}
	}

	// The primary's yes was for 60 s (ValidForMillis) on the proxy's
	// clock: the proxy asks again once they have passed, not before.
	authorizations := func() int { primary.mu.Lock(); defer primary.mu.Unlock(); return len(primary.authorized) }
	elapsed := clock.Since(start)
	if elapsed >= time.Minute-time.Millisecond {
		t.Fatalf("the heartbeats above took %s on the clock, past the answer's 60s", elapsed)
	}
	coderdtest.AdvanceClock(ctx, t, clock, time.Minute-time.Millisecond-elapsed)
	_ = dial(2).Close()
	if got := authorizations(); got != 1 {
		t.Errorf("authorize-connect calls a millisecond before the answer expired: got %d, want 1 (cached)", got)
	}
	coderdtest.AdvanceClock(ctx, t, clock, time.Millisecond)
	_ = dial(3).Close()
	if got := authorizations(); got != 2 {
		t.Errorf("authorize-connect calls once the answer expired: got %d, want 2", got)
	}
}
