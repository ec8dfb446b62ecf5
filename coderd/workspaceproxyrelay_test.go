package coderd_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/yamux"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testagent"
	"airgapcoder/internal/testwait"
	"airgapcoder/relayconn"
)

// testProxy is a workspace proxy's side of a relay session, played by the
// test: it opens OpAgent and OpDial streams and receives the OpDial
// streams the primary opens.
type testProxy struct {
	mux   *yamux.Session
	dials chan proxyDial
}

// proxyDial is an OpDial stream the primary opened, its request read.
type proxyDial struct {
	req    codersdk.ProxyRelayRequest
	stream net.Conn
}

// dialTestProxy opens a relay session to d with proxy token token; the
// test's end closes it.
func dialTestProxy(t *testing.T, d *coderdtest.Deployment, token string) (*testProxy, error) {
	t.Helper()
	return dialTestProxyQuery(t, d, token, "replica_id="+uuid.NewString())
}

func dialTestProxyQuery(t *testing.T, d *coderdtest.Deployment, token, query string) (*testProxy, error) {
	t.Helper()
	u := d.URL.JoinPath("/api/v2/workspaceproxies/me/relay")
	u.RawQuery = query
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := relayconn.DialUpgrade(ctx, http.DefaultClient, u, http.Header{codersdk.ExternalProxyAuthTokenHeader: {token}}, codersdk.ReadBodyAsError)
	if err != nil {
		return nil, err
	}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	mux, err := yamux.Client(conn, cfg)
	if err != nil {
		_ = conn.Close()
		t.Fatalf("start the proxy's yamux client: %v", err)
	}
	p := &testProxy{mux: mux, dials: make(chan proxyDial, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			stream, err := mux.AcceptStream()
			if err != nil {
				return
			}
			var req codersdk.ProxyRelayRequest
			if err := relayconn.ReadFrame(stream, &req); err != nil {
				_ = stream.Close()
				continue
			}
			select {
			case p.dials <- proxyDial{req: req, stream: stream}:
			default:
				_ = stream.Close()
			}
		}
	}()
	t.Cleanup(func() {
		_ = mux.Close()
		<-done
		close(p.dials)
		for d := range p.dials {
			_ = d.stream.Close()
		}
	})
	return p, nil
}

// open opens a stream with req and reads the primary's first answer.
func (p *testProxy) open(t *testing.T, req codersdk.ProxyRelayRequest) (net.Conn, codersdk.ProxyRelayReply) {
	t.Helper()
	stream, err := p.mux.Open()
	if err != nil {
		t.Fatalf("open a %s stream: %v", req.Op, err)
	}
	t.Cleanup(func() { _ = stream.Close() })
	_ = stream.SetDeadline(time.Now().Add(40 * time.Second))
	if err := relayconn.WriteFrame(stream, req); err != nil {
		t.Fatalf("send the %s request: %v", req.Op, err)
	}
	var reply codersdk.ProxyRelayReply
	if err := relayconn.ReadFrame(stream, &reply); err != nil {
		t.Fatalf("read the answer to the %s request: %v", req.Op, err)
	}
	_ = stream.SetDeadline(time.Time{})
	return stream, reply
}

// nextDial waits for the primary's next OpDial stream.
func (p *testProxy) nextDial(t *testing.T) proxyDial {
	t.Helper()
	select {
	case d := <-p.dials:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no dial stream from the primary within 10s")
		return proxyDial{}
	}
}

// proxyRelayFixture is a deployment with alice's workspace, whose agent
// nobody runs yet, and a workspace proxy.
type proxyRelayFixture struct {
	d                 *coderdtest.Deployment
	owner, alice, bob *codersdk.Client
	daemon            *coderdtest.Daemon
	workspace         codersdk.Workspace
	agentID, token    string
	proxyName         string
	proxyToken        string
}

func newProxyRelayFixture(t *testing.T, opts coderdtest.Options) *proxyRelayFixture {
	t.Helper()
	opts.ProvisionerPSK = "psk"
	if opts.AgentHeartbeatInterval == 0 {
		opts.AgentHeartbeatInterval = 200 * time.Millisecond
	}
	f := &proxyRelayFixture{d: coderdtest.New(t, opts), token: uuid.NewString(), proxyName: "eu"}
	f.owner, _ = f.d.CreateFirstUser(t)
	f.alice, _ = f.d.CreateUser(t, f.owner, "alice")
	f.bob, _ = f.d.CreateUser(t, f.owner, "bob")
	f.daemon = f.d.NewDaemon(t, "test", nil)
	f.workspace = coderdtest.CreateWorkspaceWithAgent(t, f.owner, f.alice, f.daemon, "dev", codersdk.ProvisionedAgent{Token: f.token, Directory: t.TempDir()})
	f.agentID = coderdtest.WorkspaceAgent(t, f.workspace).ID
	created, err := f.owner.CreateWorkspaceProxy(context.Background(), codersdk.CreateWorkspaceProxyRequest{Name: f.proxyName})
	if err != nil {
		t.Fatal(err)
	}
	f.proxyToken = created.ProxyToken
	return f
}

func (f *proxyRelayFixture) proxyClient() *codersdk.ProxyClient {
	return &codersdk.ProxyClient{Client: f.d.Client(), Token: f.proxyToken}
}

// echoOver writes msg on c and reads it back, as an echo server answers.
func echoOver(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read the echo of %q: %v", msg, err)
	}
	if string(buf) != msg {
		t.Fatalf("echo: got %q, want %q", buf, msg)
	}
}

// TestWorkspaceProxyRelaySession: only a live proxy's token opens a relay
// session; a new session of the same proxy replaces the old; deleting the
// proxy closes its session at once.
func TestWorkspaceProxyRelaySession(t *testing.T) {
	t.Parallel()
	f := newProxyRelayFixture(t, coderdtest.Options{})
	ctx := context.Background()
	id, _, _ := strings.Cut(f.proxyToken, ":")

	for _, tc := range []struct {
		name, token, query string
		status             int
		message            string
	}{
		{"no token", "", "replica_id=r1", http.StatusUnauthorized, "Send the workspace proxy's token"},
		{"malformed token", "nope", "replica_id=r1", http.StatusUnauthorized, "Invalid workspace proxy token"},
		{"wrong secret", id + ":" + strings.Repeat("x", 32), "replica_id=r1", http.StatusUnauthorized, "the secret does not match"},
		{"no replica id", f.proxyToken, "", http.StatusBadRequest, "Validation failed"},
	} {
		_, err := dialTestProxyQuery(t, f.d, tc.token, tc.query)
		var sdkErr *codersdk.Error
		if !errors.As(err, &sdkErr) || sdkErr.StatusCode != tc.status || !strings.Contains(sdkErr.Message, tc.message) {
			t.Errorf("%s: got %v, want %d %q", tc.name, err, tc.status, tc.message)
		}
	}
	// A plain GET is told to upgrade.
	req, err := http.NewRequest(http.MethodGet, f.d.URL.String()+"/api/v2/workspaceproxies/me/relay?replica_id=r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(codersdk.ExternalProxyAuthTokenHeader, f.proxyToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("GET without an upgrade: got %d, want 426", resp.StatusCode)
	}

	first, err := dialTestProxy(t, f.d, f.proxyToken)
	if err != nil {
		t.Fatalf("open the relay session: %v", err)
	}
	second, err := dialTestProxy(t, f.d, f.proxyToken)
	if err != nil {
		t.Fatalf("open a second relay session: %v", err)
	}
	testwait.For(t, 10*time.Second, "the first relay session closed", func() (bool, string) {
		return first.mux.IsClosed(), "the first session is still open after the proxy opened a second"
	})
	if second.mux.IsClosed() {
		t.Fatal("the second session closed")
	}

	// Another replica holds a session of the same proxy (one of its
	// replicas, say); it hears of the deletion through the database.
	b := coderdtest.New(t, coderdtest.Options{DatabaseURL: f.d.DatabaseURL})
	onB, err := dialTestProxy(t, b, f.proxyToken)
	if err != nil {
		t.Fatalf("open a relay session to another replica: %v", err)
	}

	if err := f.owner.DeleteWorkspaceProxy(ctx, f.proxyName); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*testProxy{"this replica's": second, "the other replica's": onB} {
		select {
		case <-p.mux.CloseChan():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s relay session of a deleted proxy is still open after 10s", name)
		}
	}
	_, err = dialTestProxy(t, f.d, f.proxyToken)
	if !codersdk.IsStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), "was deleted") {
		t.Errorf("relay session of a deleted proxy: got %v, want 401 saying it was deleted", err)
	}
}

// TestWorkspaceProxyRelayAgent: an agent connected to a proxy is connected
// to the primary's replica that holds the proxy's session: users reach it
// through that replica and another one, its new build re-keys it, and it
// is disconnected when its stream or the whole session ends.
func TestWorkspaceProxyRelayAgent(t *testing.T) {
	t.Parallel()
	f := newProxyRelayFixture(t, coderdtest.Options{})
	ctx := context.Background()
	p, err := dialTestProxy(t, f.d, f.proxyToken)
	if err != nil {
		t.Fatalf("open the relay session: %v", err)
	}

	_, reply := p.open(t, codersdk.ProxyRelayRequest{Op: codersdk.ProxyRelayOpAgent, AgentToken: uuid.NewString()})
	if reply.Status != http.StatusUnauthorized || reply.AgentID != "" {
		t.Errorf("agent with an unknown token: got %+v, want status 401 and no agent id", reply)
	}
	_, reply = p.open(t, codersdk.ProxyRelayRequest{Op: "bogus"})
	if reply.Status != http.StatusBadRequest || !strings.Contains(reply.Message, "Unknown relay stream operation") {
		t.Errorf("unknown operation: got %+v, want 400", reply)
	}

	agentStream, reply := p.open(t, codersdk.ProxyRelayRequest{Op: codersdk.ProxyRelayOpAgent, AgentToken: f.token, Remote: "10.0.0.7:4000"})
	if reply.Status != 0 || reply.AgentID != f.agentID {
		t.Fatalf("agent with its token: got %+v, want agent id %s", reply, f.agentID)
	}
	testagent.WaitStatus(t, f.alice, f.agentID, codersdk.AgentStatusConnected)

	// A user's connection through the primary arrives on the proxy as a
	// dial with the header the agent gets; bytes go both ways.
	type dialed struct {
		conn net.Conn
		err  error
	}
	dialUser := func(c *codersdk.Client, port uint16) chan dialed {
		out := make(chan dialed, 1)
		go func() {
			conn, err := c.DialWorkspaceAgent(ctx, f.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: port})
			out <- dialed{conn, err}
		}()
		return out
	}
	answered := dialUser(f.alice, 8080)
	d := p.nextDial(t)
	h := d.req.Header
	if d.req.Op != codersdk.ProxyRelayOpDial || d.req.AgentID != f.agentID || h.Kind != codersdk.RelayKindTCP || h.Port != 8080 || h.User != "alice" || h.ConnID == "" {
		t.Fatalf("dial the primary opened: got %+v, want op dial to agent %s, tcp port 8080 for alice with a conn id", d.req, f.agentID)
	}
	if err := relayconn.WriteFrame(d.stream, codersdk.ProxyRelayReply{}); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(d.stream, d.stream) }() // the "agent" echoes
	got := <-answered
	if got.err != nil {
		t.Fatalf("alice's connection through the proxy: %v", got.err)
	}
	echoOver(t, got.conn, "hello through the proxy")
	_ = got.conn.Close()

	// The agent's refusal, as the proxy relays it, is the user's 502.
	answered = dialUser(f.alice, 9)
	d = p.nextDial(t)
	_ = relayconn.WriteFrame(d.stream, codersdk.ProxyRelayReply{Status: http.StatusBadGateway, Message: "dial tcp 127.0.0.1:9: connect: connection refused"})
	_ = d.stream.Close()
	got = <-answered
	if !codersdk.IsStatus(got.err, http.StatusBadGateway) || !strings.Contains(got.err.Error(), "connection refused") {
		t.Errorf("refused port through the proxy: got %v, want 502 with the agent's reason", got.err)
	}

	// Another replica reaches the agent through the replica that holds the
	// proxy's session.
	b := coderdtest.New(t, coderdtest.Options{DatabaseURL: f.d.DatabaseURL, AgentHeartbeatInterval: 200 * time.Millisecond})
	aliceOnB := b.Client()
	aliceOnB.SessionToken = f.alice.SessionToken
	answered = dialUser(aliceOnB, 8081)
	d = p.nextDial(t)
	if d.req.AgentID != f.agentID || d.req.Header.Port != 8081 || d.req.Header.User != "alice" {
		t.Fatalf("dial through another replica: got %+v", d.req)
	}
	_ = relayconn.WriteFrame(d.stream, codersdk.ProxyRelayReply{})
	go func() { _, _ = io.Copy(d.stream, d.stream) }()
	got = <-answered
	if got.err != nil {
		t.Fatalf("alice's connection through another replica and the proxy: %v", got.err)
	}
	echoOver(t, got.conn, "hello across replicas")
	_ = got.conn.Close()

	// A new build gives the token a new agent row: the proxy is told.
	if _, err := f.alice.CreateWorkspaceBuild(ctx, f.workspace.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart}); err != nil {
		t.Fatal(err)
	}
	f.daemon.CompleteNext(t, codersdk.CompleteJobRequest{
		State: []byte(`{"build":2}`),
		Resources: []codersdk.ProvisionedResource{{Type: "terraform_data", Name: "workspace", Agents: []codersdk.ProvisionedAgent{{
			Name: "main", OperatingSystem: "linux", Architecture: "amd64", Token: f.token, Directory: t.TempDir(),
		}}}},
	})
	w, err := f.alice.Workspace(ctx, f.workspace.ID)
	if err != nil {
		t.Fatal(err)
	}
	newAgentID := coderdtest.WorkspaceAgent(t, w).ID
	if newAgentID == f.agentID {
		t.Fatal("the new build kept the agent's id")
	}
	_ = agentStream.SetReadDeadline(time.Now().Add(15 * time.Second))
	var moved codersdk.ProxyRelayReply
	if err := relayconn.ReadFrame(agentStream, &moved); err != nil {
		t.Fatalf("read the agent's move to the new build: %v", err)
	}
	_ = agentStream.SetReadDeadline(time.Time{})
	if moved.AgentID != newAgentID || moved.Status != 0 {
		t.Fatalf("move to the new build: got %+v, want agent id %s", moved, newAgentID)
	}
	testagent.WaitStatus(t, f.alice, newAgentID, codersdk.AgentStatusConnected)

	// The agent's connection to the proxy ends: it is disconnected.
	_ = agentStream.Close()
	testagent.WaitStatus(t, f.alice, newAgentID, codersdk.AgentStatusDisconnected)

	// Connected again, then the whole session ends: disconnected too.
	_, reply = p.open(t, codersdk.ProxyRelayRequest{Op: codersdk.ProxyRelayOpAgent, AgentToken: f.token})
	if reply.AgentID != newAgentID {
		t.Fatalf("agent connected again: got %+v, want agent id %s", reply, newAgentID)
	}
	testagent.WaitStatus(t, f.alice, newAgentID, codersdk.AgentStatusConnected)
	_ = p.mux.Close()
	testagent.WaitStatus(t, f.alice, newAgentID, codersdk.AgentStatusDisconnected)
}

// TestWorkspaceProxyRelayDial: a proxy's dial reaches an agent connected
// to the primary directly and carries bytes; refusals come back with
// their status.
func TestWorkspaceProxyRelayDial(t *testing.T) {
	t.Parallel()
	f := newProxyRelayFixture(t, coderdtest.Options{AgentKeepAliveInterval: time.Second})
	startAgent(t, f.d, f.token)
	testagent.WaitStatus(t, f.alice, f.agentID, codersdk.AgentStatusConnected)
	echoPort := uint16(coderdtest.EchoServer(t))
	p, err := dialTestProxy(t, f.d, f.proxyToken)
	if err != nil {
		t.Fatalf("open the relay session: %v", err)
	}
	hdr := func(kind string, port uint16) codersdk.RelayHeader {
		return codersdk.RelayHeader{Kind: kind, Port: port, ConnID: "c0ffee", User: "alice"}
	}

	stream, reply := p.open(t, codersdk.ProxyRelayRequest{Op: codersdk.ProxyRelayOpDial, AgentID: f.agentID, Header: hdr(codersdk.RelayKindTCP, echoPort), Remote: "10.0.0.8:5000"})
	if reply.Status != 0 {
		t.Fatalf("dial the echo server: got %+v, want status 0", reply)
	}
	echoOver(t, stream, "hello from the proxy")
	echoOver(t, stream, strings.Repeat("x", 1<<20))
	_ = stream.Close()

	for _, tc := range []struct {
		name    string
		req     codersdk.ProxyRelayRequest
		status  int
		message string
	}{
		{"refused port", codersdk.ProxyRelayRequest{AgentID: f.agentID, Header: hdr(codersdk.RelayKindTCP, uint16(unusedPort(t)))}, http.StatusBadGateway, "The agent could not connect"},
		{"unknown agent", codersdk.ProxyRelayRequest{AgentID: uuid.NewString(), Header: hdr(codersdk.RelayKindTCP, echoPort)}, http.StatusNotFound, "not found"},
		{"no port", codersdk.ProxyRelayRequest{AgentID: f.agentID, Header: hdr(codersdk.RelayKindTCP, 0)}, http.StatusBadRequest, "no port"},
		{"no user", codersdk.ProxyRelayRequest{AgentID: f.agentID, Header: codersdk.RelayHeader{Kind: codersdk.RelayKindSSH}}, http.StatusBadRequest, "names no user"},
		{"bad kind", codersdk.ProxyRelayRequest{AgentID: f.agentID, Header: hdr("udp", 53)}, http.StatusBadRequest, "must be ssh, tcp or pty"},
	} {
		tc.req.Op = codersdk.ProxyRelayOpDial
		_, reply := p.open(t, tc.req)
		if reply.Status != tc.status || !strings.Contains(reply.Message, tc.message) {
			t.Errorf("%s: got %+v, want %d %q", tc.name, reply, tc.status, tc.message)
		}
	}
}

// unusedPort is a loopback port nothing listens on.
func unusedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return port
}

// TestWorkspaceProxyAuthorizeConnect: the primary answers a proxy about a
// user's token as it answers the user's own connect request, and audits
// the refusals with the proxy's name.
func TestWorkspaceProxyAuthorizeConnect(t *testing.T) {
	t.Parallel()
	clock := newTestClock() // ratelimit_test.go
	f := newProxyRelayFixture(t, coderdtest.Options{Now: clock.now})
	ctx := context.Background()
	pc := f.proxyClient()
	authorize := func(token, agentID string) (codersdk.ProxyAuthorizeConnectResponse, error) {
		return pc.AuthorizeConnect(ctx, codersdk.ProxyAuthorizeConnectRequest{
			SessionToken: token, AgentID: agentID, Kind: codersdk.RelayKindTCP, Port: 8080, Remote: "10.0.0.9:6000",
		})
	}

	for name, c := range map[string]*codersdk.Client{"alice (the owner of the workspace)": f.alice, "admin (owner role)": f.owner} {
		got, err := authorize(c.SessionToken, f.agentID)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.AgentID != f.agentID || got.AgentName != "main" || got.WorkspaceID != f.workspace.ID || got.WorkspaceName != "dev" ||
			got.OwnerName != "alice" || got.UserID == "" || got.ValidFor() != 10*time.Second {
			t.Errorf("%s: got %+v, want agent main of alice/dev, valid for 10s", name, got)
		}
	}
	if _, err := authorize(f.bob.SessionToken, f.agentID); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("bob (a member) to alice's agent: got %v, want 404 (he cannot see the workspace)", err)
	}
	tadmin, _ := f.d.CreateUser(t, f.owner, "tadmin", codersdk.RoleTemplateAdmin)
	if _, err := authorize(tadmin.SessionToken, f.agentID); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("a template admin to alice's agent: got %v, want 403", err)
	}
	if _, err := authorize(f.alice.SessionToken, uuid.NewString()); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("unknown agent: got %v, want 404", err)
	}
	if _, err := pc.AuthorizeConnect(ctx, codersdk.ProxyAuthorizeConnectRequest{SessionToken: f.alice.SessionToken, AgentID: f.agentID, Kind: "udp"}); !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("kind udp: got %v, want 400", err)
	}
	if _, err := (&codersdk.ProxyClient{Client: f.d.Client(), Token: "nope"}).AuthorizeConnect(ctx, codersdk.ProxyAuthorizeConnectRequest{SessionToken: f.alice.SessionToken, AgentID: f.agentID, Kind: "ssh"}); !codersdk.IsStatus(err, http.StatusUnauthorized) {
		t.Errorf("a wrong proxy token: got %v, want 401", err)
	}
	for _, token := range []string{"", "garbage"} {
		if _, err := authorize(token, f.agentID); !codersdk.IsStatus(err, http.StatusUnauthorized) {
			t.Errorf("session token %q: got %v, want 401", token, err)
		}
	}

	// The refusal of the template admin is in the audit log, naming the proxy.
	logs := auditLogs(t, f.owner, "action:connect username:tadmin")
	l := requireAuditFrom(t, logs, auditWant{actor: "tadmin", action: codersdk.AuditActionConnect, resourceType: codersdk.AuditResourceWorkspaceAgent,
		workspace: "alice/dev", status: http.StatusForbidden, fields: map[string]any{"proxy": f.proxyName, "kind": "tcp"}}, "10.0.0.9")
	if !strings.Contains(string(l.AdditionalFields), "Only the workspace's owner") {
		t.Errorf("refusal record: got fields %s, want the refusal's message", l.AdditionalFields)
	}

	// A signed-out session is refused at once.
	second := f.d.Client()
	login, err := second.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "alice@example.com", Password: coderdtest.FirstUserPassword})
	if err != nil {
		t.Fatal(err)
	}
	second.SessionToken = login.SessionToken
	if _, err := authorize(second.SessionToken, f.agentID); err != nil {
		t.Fatalf("alice's second session: %v", err)
	}
	if err := second.Logout(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := authorize(second.SessionToken, f.agentID); !codersdk.IsStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), "no such key") {
		t.Errorf("a deleted session token: got %v, want 401 no such key", err)
	}

	// A stopped workspace's agent: 409, as the primary's connect answers.
	if _, err := f.alice.CreateWorkspaceBuild(ctx, f.workspace.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err != nil {
		t.Fatal(err)
	}
	f.daemon.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`)})
	if _, err := authorize(f.alice.SessionToken, f.agentID); !codersdk.IsStatus(err, http.StatusConflict) || !strings.Contains(err.Error(), "coder start dev") {
		t.Errorf("agent of a stopped workspace: got %v, want 409 saying to start it", err)
	}

	// Expired sessions are refused.
	clock.advance(25 * time.Hour)
	if _, err := authorize(f.alice.SessionToken, f.agentID); !codersdk.IsStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("an expired session token: got %v, want 401 expired", err)
	}
}

// requireAuditFrom is requireAudit for a record whose source address is
// ip (a connection through a proxy is from the user's address there).
func requireAuditFrom(t *testing.T, logs []codersdk.AuditLog, w auditWant, ip string) codersdk.AuditLog {
	t.Helper()
	for _, l := range logs {
		if w.matches(l) {
			if l.IP != ip {
				t.Errorf("record %s: got ip %q, want %s", w, l.IP, ip)
			}
			return l
		}
	}
	return requireAudit(t, logs, w) // fails, listing what there is
}

// TestWorkspaceProxyConnectionReport: a proxy's report of a connection is
// an audit record like a connection through the primary, naming the proxy.
func TestWorkspaceProxyConnectionReport(t *testing.T) {
	t.Parallel()
	f := newProxyRelayFixture(t, coderdtest.Options{})
	ctx := context.Background()
	pc := f.proxyClient()
	aliceUser, err := f.alice.User(ctx, codersdk.Me)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now().Add(-3 * time.Second)
	report := codersdk.ProxyConnectionReport{
		UserID: aliceUser.ID, AgentID: f.agentID, ConnID: "feed01", Kind: codersdk.RelayKindTCP, Port: 8080, Remote: "10.0.0.10:7000",
		StartedAt: began, EndedAt: began.Add(2500 * time.Millisecond), BytesUp: 1234, BytesDown: 56789,
	}
	if err := pc.ReportConnection(ctx, report); err != nil {
		t.Fatalf("report a connection: %v", err)
	}
	refused := report
	refused.ConnID, refused.Port, refused.Error, refused.BytesUp, refused.BytesDown = "feed02", 9, "dial tcp 127.0.0.1:9: connect: connection refused", 0, 0
	if err := pc.ReportConnection(ctx, refused); err != nil {
		t.Fatalf("report a refused connection: %v", err)
	}
	logs := auditLogs(t, f.owner, "action:connect username:alice")
	requireAuditFrom(t, logs, auditWant{actor: "alice", action: codersdk.AuditActionConnect, resourceType: codersdk.AuditResourceWorkspaceAgent,
		target: "alice/dev.main", workspace: "alice/dev", status: http.StatusSwitchingProtocols, fields: map[string]any{
			"proxy": f.proxyName, "kind": "tcp", "port": float64(8080), "conn_id": "feed01", "bytes_to_agent": float64(1234),
			"bytes_from_agent": float64(56789), "duration_ms": float64(2500), "remote": "10.0.0.10:7000",
		}}, "10.0.0.10")
	requireAuditFrom(t, logs, auditWant{actor: "alice", action: codersdk.AuditActionConnect, resourceType: codersdk.AuditResourceWorkspaceAgent,
		workspace: "alice/dev", status: http.StatusBadGateway, fields: map[string]any{
			"proxy": f.proxyName, "conn_id": "feed02", "error": refused.Error,
		}}, "10.0.0.10")

	for name, bad := range map[string]func(r *codersdk.ProxyConnectionReport){
		"unknown user":      func(r *codersdk.ProxyConnectionReport) { r.UserID = uuid.NewString() },
		"unknown agent":     func(r *codersdk.ProxyConnectionReport) { r.AgentID = uuid.NewString() },
		"no kind":           func(r *codersdk.ProxyConnectionReport) { r.Kind = "" },
		"ended before":      func(r *codersdk.ProxyConnectionReport) { r.EndedAt = r.StartedAt.Add(-time.Second) },
		"negative bytes":    func(r *codersdk.ProxyConnectionReport) { r.BytesUp = -1 },
		"malformed user id": func(r *codersdk.ProxyConnectionReport) { r.UserID = "alice" },
	} {
		r := report
		bad(&r)
		if err := pc.ReportConnection(ctx, r); !codersdk.IsStatus(err, http.StatusBadRequest) {
			t.Errorf("%s: got %v, want 400", name, err)
		}
	}
	if err := (&codersdk.ProxyClient{Client: f.d.Client(), Token: "nope"}).ReportConnection(ctx, report); !codersdk.IsStatus(err, http.StatusUnauthorized) {
		t.Errorf("a wrong proxy token: got %v, want 401", err)
	}
}

// TestWorkspaceProxyHeartbeatActivity: the agents a proxy's heartbeat
// reports active count as activity on their workspaces.
func TestWorkspaceProxyHeartbeatActivity(t *testing.T) {
	t.Parallel()
	f := newProxyRelayFixture(t, coderdtest.Options{})
	ctx := context.Background()
	pc := f.proxyClient()
	w, err := f.alice.Workspace(ctx, f.workspace.ID)
	if err != nil {
		t.Fatal(err)
	}
	before := w.LastUsedAt
	req := registerReq("r1") // workspaceproxies_test.go
	req.ActiveAgentIDs = []string{f.agentID, f.agentID, uuid.NewString()}
	if _, err := pc.RegisterWorkspaceProxy(ctx, req); err != nil {
		t.Fatalf("heartbeat with active agents (one unknown): %v", err)
	}
	w, err = f.alice.Workspace(ctx, f.workspace.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !w.LastUsedAt.After(before) {
		t.Errorf("workspace last used: got %s, want after %s (the heartbeat reported its agent active)", w.LastUsedAt, before)
	}

	req.ActiveAgentIDs = []string{"not-an-id"}
	if _, err := pc.RegisterWorkspaceProxy(ctx, req); !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("malformed agent id: got %v, want 400", err)
	}
	req.ActiveAgentIDs = make([]string, 10_001)
	for i := range req.ActiveAgentIDs {
		req.ActiveAgentIDs[i] = f.agentID
	}
	if _, err := pc.RegisterWorkspaceProxy(ctx, req); !codersdk.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "at most 10000") {
		t.Errorf("10001 active agents: got %v, want 400", err)
	}
}
