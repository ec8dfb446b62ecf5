package wsproxy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"golang.org/x/crypto/ssh"

	"airgapcoder/agent"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testagent"
	"airgapcoder/internal/testwait"
	"airgapcoder/relayconn"
)

// cutter forwards TCP connections to target and can cut every one it
// carries: a network failure between a proxy and the primary.
type cutter struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	c.wg.Go(c.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cut()
		c.wg.Wait()
	})
	return c
}

func (c *cutter) track(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = conn.Close()
		return false
	}
	c.conns[conn] = struct{}{}
	return true
}

func (c *cutter) accept() {
	for {
		in, err := c.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", c.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !c.track(in) || !c.track(out) {
			_ = in.Close()
			_ = out.Close()
			continue
		}
		c.wg.Go(func() { _, _ = io.Copy(out, in); _ = out.Close(); _ = in.Close() })
		c.wg.Go(func() { _, _ = io.Copy(in, out); _ = out.Close(); _ = in.Close() })
	}
}

// cut closes every connection carried so far.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for conn := range c.conns {
		_ = conn.Close()
		delete(c.conns, conn)
	}
}

// relayEnv is a primary with a workspace of alice's whose agent runs in
// this process connected to a workspace proxy, reached from the proxy
// through a cutter.
type relayEnv struct {
	d       *coderdtest.Deployment
	admin   *codersdk.Client
	alice   *codersdk.Client
	agentID string // connected to the proxy
	// directAgentID is another workspace's agent, connected to the primary.
	directAgentID string
	proxyURL      *url.URL
	proxyDone     chan error
	proxyLogs     *syncbuf.Buffer
	link          *cutter
	agentClient   *codersdk.Client
	daemon        *coderdtest.Daemon
	workspace     codersdk.Workspace // the proxy's agent's
	token         string             // its agent token
}

func newRelayEnv(t *testing.T) *relayEnv {
	t.Helper()
	bins := t.TempDir()
	if err := os.WriteFile(filepath.Join(bins, "coder-darwin-arm64"), []byte("the darwin agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &relayEnv{proxyDone: make(chan error, 1), proxyLogs: &syncbuf.Buffer{}}
	e.d = coderdtest.New(t, coderdtest.Options{
		ProvisionerPSK: "psk", AgentHeartbeatInterval: 200 * time.Millisecond, AgentKeepAliveInterval: time.Second,
		WorkspaceProxyHeartbeatInterval: 500 * time.Millisecond, WorkspaceProxyAuthTTL: time.Second, AgentBinariesDir: bins,
	})
	e.admin, _ = e.d.CreateFirstUser(t)
	e.alice, _ = e.d.CreateUser(t, e.admin, "alice")
	daemon := e.d.NewDaemon(t, "test", nil)
	token := uuid.NewString()
	ws := coderdtest.CreateWorkspaceWithAgent(t, e.admin, e.alice, daemon, "dev", codersdk.ProvisionedAgent{Token: token, Directory: t.TempDir()})
	e.agentID = coderdtest.WorkspaceAgent(t, ws).ID
	e.daemon, e.workspace, e.token = daemon, ws, token

	// The proxy reaches the primary through the cutter.
	e.link = newCutter(t, e.d.URL.Host)
	via, _ := url.Parse("http://" + e.link.ln.Addr().String())
	owner := codersdk.New(via)
	owner.SessionToken = e.admin.SessionToken
	e.proxyURL, _ = coderdtest.NewWorkspaceProxy(t, owner, "eu", coderdtest.WorkspaceProxyOptions{
		Done: e.proxyDone, Logger: slog.New(slog.NewTextHandler(e.proxyLogs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})

	// The agent's URL is the proxy's.
	e.agentClient = codersdk.New(e.proxyURL)
	e.agentClient.SessionToken = token
	startAgent(t, e.agentClient)

	// Another workspace's agent connects to the primary directly.
	direct := uuid.NewString()
	ws = coderdtest.CreateWorkspaceWithAgent(t, e.admin, e.alice, daemon, "direct", codersdk.ProvisionedAgent{Token: direct, Directory: t.TempDir()})
	e.directAgentID = coderdtest.WorkspaceAgent(t, ws).ID
	dc := e.d.Client()
	dc.SessionToken = direct
	startAgent(t, dc)
	return e
}

// startAgent runs an agent with client c until the test ends.
func startAgent(t *testing.T, c *codersdk.Client) {
	t.Helper()
	testagent.Start(t, agent.Options{Client: c, PortsInterval: 200 * time.Millisecond})
}

// userClient is alice's client at u.
func (e *relayEnv) userClient(u *url.URL) *codersdk.Client {
	c := codersdk.New(u)
	c.SessionToken = e.alice.SessionToken
	return c
}

// waitConnected waits for the primary to show the agent connected and
// ready (its lifecycle reports came through the proxy).
func (e *relayEnv) waitConnected(t *testing.T, agentID string) {
	t.Helper()
	testagent.WaitReady(t, e.alice, agentID)
}

// echoBothWays sends n random bytes over a tcp connection to an echo
// server in the workspace, through c, and checks they come back intact.
func echoBothWays(t *testing.T, c *codersdk.Client, agentID string, port int, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := c.DialWorkspaceAgent(ctx, agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(port)})
	if err != nil {
		t.Fatalf("dial port %d through %s: %v", port, c.URL, err)
	}
	defer conn.Close()
	want := make([]byte, n)
	_, _ = rand.Read(want)
	werr := make(chan error, 1)
	go func() { _, err := conn.Write(want); werr <- err }()
	got := make([]byte, n)
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("read the echo through %s: %v", c.URL, err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write through %s: %v", c.URL, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echo through %s: got %d bytes that differ from the %d sent", c.URL, len(got), n)
	}
}

// sshEcho runs a command over the agent's SSH server through c.
func sshEcho(t *testing.T, c *codersdk.Client, agentID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := c.DialWorkspaceAgent(ctx, agentID, codersdk.DialOptions{Kind: codersdk.RelayKindSSH})
	if err != nil {
		t.Fatalf("dial ssh through %s: %v", c.URL, err)
	}
	sconn, chans, reqs, err := ssh.NewClientConn(conn, "dev", &ssh.ClientConfig{User: "alice", HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatalf("ssh handshake through %s: %v", c.URL, err)
	}
	client := ssh.NewClient(sconn, chans, reqs)
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		t.Fatalf("ssh session: %v", err)
	}
	defer sess.Close()
	out, err := sess.Output("echo hello from the workspace")
	if err != nil {
		t.Fatalf("ssh command through %s: %v", c.URL, err)
	}
	return strings.TrimSpace(string(out))
}

func TestRelayThroughProxy(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	e.waitConnected(t, e.agentID)
	e.waitConnected(t, e.directAgentID)
	echo := coderdtest.EchoServer(t)
	viaProxy, viaPrimary := e.userClient(e.proxyURL), e.userClient(e.d.URL)

	t.Run("tcp through the proxy", func(t *testing.T) {
		echoBothWays(t, viaProxy, e.agentID, echo, 4<<20)
		if logs := e.proxyLogs.String(); !strings.Contains(logs, "workspace agent connected") || strings.Contains(logs, "relay connection from the primary opened") {
			t.Errorf("proxy logs: want the agent connected here and the connection relayed by the proxy alone\n%s", logs)
		}
	})
	t.Run("websocket through the proxy", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		u := e.proxyURL.JoinPath("/api/v2/workspaceagents", e.agentID, "connect")
		u.Scheme, u.RawQuery = "ws", fmt.Sprintf("kind=tcp&port=%d", echo)
		opts := &websocket.DialOptions{HTTPHeader: http.Header{codersdk.SessionTokenHeader: {e.alice.SessionToken}}}
		if got := testagent.WebSocketRoundTrip(ctx, t, u.String(), opts, websocket.MessageBinary, "over a websocket"); got != "over a websocket" {
			t.Errorf("websocket echo: got %q, want %q", got, "over a websocket")
		}
	})
	t.Run("prepared connection through the proxy", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := viaProxy.PrepareWorkspaceAgentConn(ctx, e.agentID)
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		conn, err := p.Connect(ctx, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(echo)})
		if err != nil {
			t.Fatalf("connect the prepared connection: %v", err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("prepared")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len("prepared"))
		if _, err := io.ReadFull(conn, got); err != nil || string(got) != "prepared" {
			t.Errorf("prepared echo: got %q, %v", got, err)
		}
		p, err = viaProxy.PrepareWorkspaceAgentConn(ctx, e.agentID)
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		_, err = p.Connect(ctx, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: 1})
		var apiErr *codersdk.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway {
			t.Errorf("prepared connection to a closed port: got %v, want a 502", err)
		}
	})
	t.Run("ssh through the proxy", func(t *testing.T) {
		if got := sshEcho(t, viaProxy, e.agentID); got != "hello from the workspace" {
			t.Errorf("ssh output: got %q, want %q", got, "hello from the workspace")
		}
	})
	t.Run("through the primary to the agent at the proxy", func(t *testing.T) {
		echoBothWays(t, viaPrimary, e.agentID, echo, 4<<20)
		if !strings.Contains(e.proxyLogs.String(), "relay connection from the primary opened") {
			t.Errorf("proxy logs: want the primary's stream to the agent logged\n%s", e.proxyLogs)
		}
		if got := sshEcho(t, viaPrimary, e.agentID); got != "hello from the workspace" {
			t.Errorf("ssh output: got %q, want %q", got, "hello from the workspace")
		}
	})
	t.Run("through the proxy to an agent at the primary", func(t *testing.T) {
		echoBothWays(t, viaProxy, e.directAgentID, echo, 4<<20)
		if got := sshEcho(t, viaProxy, e.directAgentID); got != "hello from the workspace" {
			t.Errorf("ssh output: got %q, want %q", got, "hello from the workspace")
		}
	})
	t.Run("refusals", func(t *testing.T) {
		ctx := context.Background()
		for _, tc := range []struct {
			name   string
			c      *codersdk.Client
			opts   codersdk.DialOptions
			status int
			want   string
		}{
			{"no token", codersdk.New(e.proxyURL), codersdk.DialOptions{Kind: codersdk.RelayKindSSH}, http.StatusUnauthorized, "not signed in"},
			{"bad port", viaProxy, codersdk.DialOptions{Kind: codersdk.RelayKindTCP}, http.StatusBadRequest, "Validation failed"},
			{"closed port", viaProxy, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: 1}, http.StatusBadGateway, "could not connect"},
			{"another user's agent", e.userClientAs(t, "bob"), codersdk.DialOptions{Kind: codersdk.RelayKindSSH}, http.StatusNotFound, ""},
		} {
			_, err := tc.c.DialWorkspaceAgent(ctx, e.agentID, tc.opts)
			var apiErr *codersdk.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v, want a %d containing %q", tc.name, err, tc.status, tc.want)
			}
		}
	})
	t.Run("connections through the proxy are audited at the primary", func(t *testing.T) {
		// The connections above: opened (101) and refused by the agent
		// (502), each naming the proxy.
		for _, want := range []int{http.StatusSwitchingProtocols, http.StatusBadGateway} {
			testwait.For(t, 10*time.Second, fmt.Sprintf("a %d connect record naming the proxy", want), func() (bool, string) {
				res, err := e.admin.AuditLogs(context.Background(), codersdk.AuditLogsRequest{SearchQuery: "action:connect username:alice", Limit: 100})
				if err != nil {
					return false, err.Error()
				}
				for _, l := range res.AuditLogs {
					if l.ResourceID == e.agentID && l.StatusCode == want && strings.Contains(string(l.AdditionalFields), `"proxy":"eu"`) {
						return true, ""
					}
				}
				return false, fmt.Sprintf("%d connect records, none matching", len(res.AuditLogs))
			})
		}
	})
	t.Run("agent API calls forwarded", func(t *testing.T) {
		// The agent's lifecycle reached the primary (waitConnected); the
		// init script's download works through the proxy too.
		resp, err := http.Get(e.proxyURL.JoinPath("/bin/coder-darwin-arm64").String())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "the darwin agent" {
			t.Errorf("GET /bin/coder-darwin-arm64 through the proxy: got %d %q, want 200 %q", resp.StatusCode, body, "the darwin agent")
		}
		m, err := e.agentClient.AgentManifest(context.Background())
		if err != nil || m.AgentID != e.agentID {
			t.Errorf("manifest through the proxy: got %+v, %v; want agent %s", m, err, e.agentID)
		}
		// Spare connections are declined so that the agent stops asking
		// (agent/spares.go): not the API's JSON, no upgrade.
		if _, err := e.agentClient.ConnectAgentSpare(context.Background()); !errors.Is(err, relayconn.ErrUpgradeNotPassed) {
			t.Errorf("spare connection at the proxy: got %v, want relayconn.ErrUpgradeNotPassed", err)
		}
		// Other API calls are not the proxy's.
		resp, err = http.Get(e.proxyURL.JoinPath("/api/v2/users/me").String())
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /api/v2/users/me at the proxy: got %d, want 404", resp.StatusCode)
		}
	})
	t.Run("a revoked token stops working within the TTL", func(t *testing.T) {
		ctx := context.Background()
		key, err := e.alice.CreateToken(ctx, codersdk.Me, codersdk.CreateTokenRequest{TokenName: "revoked", Lifetime: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		c := codersdk.New(e.proxyURL)
		c.SessionToken = key.Key
		echoBothWays(t, c, e.agentID, echo, 1024) // cached from here on
		if err := c.Logout(ctx); err == nil {
			t.Fatal("signing out at the proxy: want a 404 (the proxy serves no API)")
		}
		primary := codersdk.New(e.d.URL)
		primary.SessionToken = key.Key
		if err := primary.Logout(ctx); err != nil {
			t.Fatalf("sign out at the primary: %v", err)
		}
		took := testwait.For(t, 5*time.Second, "the revoked token refused at the proxy", func() (bool, string) {
			conn, err := c.DialWorkspaceAgent(ctx, e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(echo)})
			if err == nil {
				_ = conn.Close()
				return false, "still connects"
			}
			var apiErr *codersdk.Error
			return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusUnauthorized, err.Error()
		})
		t.Logf("the revoked token was refused at the proxy %s after it was signed out", took.Round(time.Millisecond))
		// The bound is the TTL (1 s) plus a poll.
		if took > 1500*time.Millisecond {
			t.Errorf("the revoked token was refused after %s, want within the 1s TTL", took)
		}
	})
	t.Run("a new build re-keys the agent at the proxy", func(t *testing.T) {
		ctx := context.Background()
		if _, err := e.alice.CreateWorkspaceBuild(ctx, e.workspace.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart}); err != nil {
			t.Fatal(err)
		}
		e.daemon.CompleteNext(t, codersdk.CompleteJobRequest{
			State: []byte(`{"build":2}`),
			Resources: []codersdk.ProvisionedResource{{Type: "terraform_data", Name: "workspace", Agents: []codersdk.ProvisionedAgent{{
				Name: "main", OperatingSystem: "linux", Architecture: "amd64", Token: e.token, Directory: t.TempDir(),
			}}}},
		})
		w, err := e.alice.Workspace(ctx, e.workspace.ID)
		if err != nil {
			t.Fatal(err)
		}
		newID := coderdtest.WorkspaceAgent(t, w).ID
		if newID == e.agentID {
			t.Fatal("the new build kept the agent's id")
		}
		testwait.For(t, 15*time.Second, "the proxy told of the new agent id", func() (bool, string) {
			return strings.Contains(e.proxyLogs.String(), "new_agent="+newID), "no \"workspace agent moved to a new build\" log"
		})
		e.agentID = newID
		echoBothWays(t, viaProxy, e.agentID, echo, 1<<20)
		echoBothWays(t, viaPrimary, e.agentID, echo, 1<<20)
	})
	t.Run("a cut relay session is dialed again; connections in the region stay", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		open, err := viaProxy.DialWorkspaceAgent(ctx, e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(echo)})
		if err != nil {
			t.Fatal(err)
		}
		defer open.Close()
		e.link.cut()
		took := testwait.For(t, 30*time.Second, "the agent registered again over a new relay session", func() (bool, string) {
			return strings.Contains(e.proxyLogs.String(), "workspace agent registered again with the primary"), "not logged yet"
		})
		t.Logf("the agent was registered again %s after the cut", took.Round(time.Millisecond))
		if !strings.Contains(e.proxyLogs.String(), "relay session to the primary closed; re-dialing") {
			t.Errorf("proxy logs: want the closed relay session logged\n%s", e.proxyLogs)
		}
		// The connection opened before the cut still carries bytes.
		if _, err := io.WriteString(open, "still here"); err != nil {
			t.Fatalf("write on the connection opened before the cut: %v", err)
		}
		got := make([]byte, len("still here"))
		_ = open.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(open, got); err != nil || string(got) != "still here" {
			t.Errorf("the connection opened before the cut: got %q, %v; want its echo", got, err)
		}
		echoBothWays(t, viaProxy, e.agentID, echo, 1<<20)
		// The primary counts the agent connected again (its lifecycle is the
		// new build's row's: the agent did not reconnect to report it).
		testwait.For(t, 10*time.Second, "the agent connected at the primary again", func() (bool, string) {
			a, err := e.alice.WorkspaceAgent(context.Background(), e.agentID)
			if err != nil {
				return false, err.Error()
			}
			return a.Status == codersdk.AgentStatusConnected, "status " + string(a.Status)
		})
		echoBothWays(t, viaPrimary, e.agentID, echo, 1<<20)
		echoBothWays(t, viaProxy, e.directAgentID, echo, 1<<20)
	})
	t.Run("deleting the proxy stops it", func(t *testing.T) {
		if err := e.admin.DeleteWorkspaceProxy(context.Background(), "eu"); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		select {
		case err := <-e.proxyDone:
			t.Logf("the proxy stopped %s after its deletion: %v", time.Since(deleted).Round(time.Millisecond), err)
			if err == nil || !strings.Contains(err.Error(), "refused") {
				t.Errorf("Run: got %v, want the primary's refusal", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the proxy did not stop within 10s of its deletion\n%s", e.proxyLogs)
		}
	})
}

// userClientAs creates user name and returns its client at the proxy.
func (e *relayEnv) userClientAs(t *testing.T, name string) *codersdk.Client {
	t.Helper()
	u, _ := e.d.CreateUser(t, e.admin, name)
	c := codersdk.New(e.proxyURL)
	c.SessionToken = u.SessionToken
	return c
}
