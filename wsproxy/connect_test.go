package wsproxy_test

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testwait"
)

// TestUserConnectionBookkeeping checks, against a fake primary, what a
// user's connection through the proxy to an agent elsewhere costs and
// leaves: one authorize-connect per token, agent and kind within the
// answer's ValidFor; an OpDial stream with the header the agent gets; the
// agent in the heartbeats' ActiveAgentIDs while it is open; and a record
// of each connection once it ends.
func TestUserConnectionBookkeeping(t *testing.T) {
	t.Parallel()
	primary := newFakePrimary(t)
	logs := &syncbuf.Buffer{}
	s, httpClient, _, _ := startProxy(t, primary, logs)
	<-s.Ready()
	primary.waitRelaySessions(t, 1, "the relay session")
	u, _ := url.Parse("https://" + s.Addr().String())
	c := codersdk.New(u)
	c.HTTPClient = httpClient
	c.SessionToken = "alice-token"
	const agentID = "6e0c3f1a-0000-4000-8000-0000000000aa"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var conns []io.ReadWriteCloser
	for i := range 2 {
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
		conns = append(conns, conn)
	}
	active := func(want bool) func() bool {
		return func() bool {
			regs, _ := primary.state()
			last := regs[len(regs)-1]
			return slices.Equal(last.ActiveAgentIDs, []string{agentID}) == want
		}
	}
	testwait.For(t, 10*time.Second, "a heartbeat naming the agent active", testwait.Bool(active(true)))

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
	testwait.For(t, 10*time.Second, "two connection records", testwait.Bool(func() bool { primary.mu.Lock(); defer primary.mu.Unlock(); return len(primary.reports) == 2 }))
	testwait.For(t, 10*time.Second, "a heartbeat without active agents", testwait.Bool(active(false)))
	primary.mu.Lock()
	reports := slices.Clone(primary.reports)
	primary.mu.Unlock()
	for i, r := range reports {
		if !slices.ContainsFunc(dials, func(d codersdk.ProxyRelayRequest) bool { return d.Header.ConnID == r.ConnID }) {
			t.Errorf("connection record %d: conn id %q is not one the agent got", i, r.ConnID)
		}
		if r.UserID != "user-id" || r.AgentID != agentID || r.Kind != codersdk.RelayKindTCP || r.Port != 8080 ||
			r.BytesUp != int64(len("connection 0")) || r.BytesDown != r.BytesUp || r.Error != "" || r.EndedAt.Before(r.StartedAt) || r.ConnID == "" {
			t.Errorf("connection record: got %+v, want the user, agent, tcp 8080, 12 bytes each way, no error", r)
		}
	}
}
