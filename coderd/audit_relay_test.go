package coderd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"golang.org/x/crypto/ssh"

	"airgapcoder/agent"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testagent"
	"airgapcoder/internal/testwait"
)

// TestAuditRelayConnections: every relayed connection (coder ssh, port
// forward, dev URL, web terminal) is one record when it ends, with its kind, port, bytes
// both ways and duration; refused attempts are recorded too.
func TestAuditRelayConnections(t *testing.T) {
	ctx := context.Background()
	f := newRelayFixture(t)
	d, owner, alice, bob, agentID, appPort := f.d, f.owner, f.alice, f.bob, f.agentID, f.appPort

	// record waits for the connect record w describes among those of q.
	record := func(t *testing.T, q string, w auditWant) codersdk.AuditLog {
		t.Helper()
		var logs []codersdk.AuditLog
		testwait.For(t, 10*time.Second, "the audit record of "+q, func() (bool, string) {
			logs = auditLogs(t, owner, "action:connect "+q)
			return slices.ContainsFunc(logs, w.matches), fmt.Sprintf("no record %s among %d of %q", w, len(logs), q)
		})
		return requireAudit(t, logs, w)
	}
	checkConn := func(t *testing.T, l codersdk.AuditLog, kind string, port int) {
		t.Helper()
		var f struct {
			Kind       string `json:"kind"`
			Port       int    `json:"port"`
			ToAgent    int64  `json:"bytes_to_agent"`
			FromAgent  int64  `json:"bytes_from_agent"`
			DurationMS *int64 `json:"duration_ms"`
			StartedAt  string `json:"started_at"`
		}
		if err := json.Unmarshal(l.AdditionalFields, &f); err != nil {
			t.Fatal(err)
		}
		if f.Kind != kind || f.Port != port || f.ToAgent == 0 || f.FromAgent == 0 || f.DurationMS == nil || f.StartedAt == "" {
			t.Errorf("record of a %s connection to port %d: got fields %s", kind, port, l.AdditionalFields)
		}
		if l.ResourceType != codersdk.AuditResourceWorkspaceAgent || l.ResourceID != agentID || l.ResourceTarget != "alice/dev.main" {
			t.Errorf("record of a %s connection: got resource %s %s %q, want the agent alice/dev.main", kind, l.ResourceType, l.ResourceID, l.ResourceTarget)
		}
	}

	t.Run("SSH", func(t *testing.T) {
		conn, err := alice.DialWorkspaceAgent(ctx, agentID, codersdk.DialOptions{Kind: codersdk.RelayKindSSH})
		if err != nil {
			t.Fatal(err)
		}
		sconn, chans, reqs, err := ssh.NewClientConn(conn, "dev", &ssh.ClientConfig{User: "alice", HostKeyCallback: ssh.InsecureIgnoreHostKey()})
		if err != nil {
			t.Fatal(err)
		}
		client := ssh.NewClient(sconn, chans, reqs)
		sess, err := client.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if out, err := sess.Output("echo hello"); err != nil || string(out) != "hello\n" {
			t.Fatalf("ssh echo: got %q, %v", out, err)
		}
		_ = client.Close()
		l := record(t, "username:alice workspace:alice/dev outcome:success", auditWant{actor: "alice", action: codersdk.AuditActionConnect, resourceType: codersdk.AuditResourceWorkspaceAgent,
			workspace: "alice/dev", status: http.StatusSwitchingProtocols, fields: map[string]any{"kind": "ssh"}})
		checkConn(t, l, "ssh", 0)
	})

	t.Run("PortForward", func(t *testing.T) {
		conn, err := alice.DialWorkspaceAgent(ctx, agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(appPort)})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /forwarded HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if string(body) != "hello from /forwarded\n" {
			t.Errorf("forwarded: got %q", body)
		}
		_ = conn.Close()
		l := record(t, "username:alice workspace:alice/dev outcome:success", auditWant{actor: "alice", action: codersdk.AuditActionConnect, resourceType: codersdk.AuditResourceWorkspaceAgent,
			workspace: "alice/dev", status: http.StatusSwitchingProtocols, fields: map[string]any{"kind": "tcp", "port": appPort}})
		checkConn(t, l, "tcp", appPort)
	})

	t.Run("PTY", func(t *testing.T) {
		id := uuid.NewString()
		ws, err := alice.WorkspaceAgentReconnectingPTY(ctx, agentID, codersdk.ReconnectingPTYOptions{Reconnect: id, Command: "read line; echo got-$line"})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"data":"pty\r"}`)); err != nil {
			t.Fatal(err)
		}
		var out []byte
		for {
			_, msg, err := ws.Read(ctx)
			if err != nil {
				if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
					t.Fatalf("web terminal: got %v, want a normal closure when the command exits", err)
				}
				break
			}
			out = append(out, msg...)
		}
		if !strings.Contains(string(out), "got-pty") {
			t.Errorf("web terminal output: got %q, want got-pty", out)
		}
		l := record(t, "username:alice workspace:alice/dev outcome:success", auditWant{actor: "alice", action: codersdk.AuditActionConnect, resourceType: codersdk.AuditResourceWorkspaceAgent,
			workspace: "alice/dev", status: http.StatusSwitchingProtocols, fields: map[string]any{"kind": "pty", "reconnect": id}})
		checkConn(t, l, "pty", 0)

		if _, err := bob.WorkspaceAgentReconnectingPTY(ctx, agentID, codersdk.ReconnectingPTYOptions{Reconnect: id}); !codersdk.IsStatus(err, http.StatusNotFound) {
			t.Fatalf("bob opening a terminal on alice's agent: got %v, want 404", err)
		}
		record(t, "username:bob outcome:failure", auditWant{actor: "bob", action: codersdk.AuditActionConnect, resourceType: codersdk.AuditResourceWorkspaceAgent,
			workspace: "alice/dev", status: http.StatusNotFound, fields: map[string]any{"kind": "pty"}})
	})

	devURL := fmt.Sprintf("%s/@alice/dev/ports/%d/page", d.URL, appPort)
	t.Run("DevURL", func(t *testing.T) {
		for _, c := range []*codersdk.Client{alice, owner} {
			status, body := coderdtest.Do(t, http.MethodGet, devURL, c.SessionToken, nil, "")
			if status != http.StatusOK || string(body) != "hello from /page\n" {
				t.Fatalf("dev URL: got %s", coderdtest.String(status, body))
			}
		}
		for _, who := range []string{"alice", "admin"} {
			l := record(t, "username:"+who+" workspace:alice/dev outcome:success", auditWant{actor: who, action: codersdk.AuditActionConnect, resourceType: codersdk.AuditResourceWorkspaceAgent,
				workspace: "alice/dev", status: http.StatusOK, fields: map[string]any{"kind": "dev-url", "target": fmt.Sprintf("ports/%d", appPort)}})
			checkConn(t, l, "dev-url", appPort)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		if _, err := bob.DialWorkspaceAgent(ctx, agentID, codersdk.DialOptions{Kind: codersdk.RelayKindSSH}); err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("bob dialing alice's agent: got %v, want 404", err)
		}
		if status, body := coderdtest.Do(t, http.MethodGet, devURL, bob.SessionToken, nil, ""); status != http.StatusNotFound {
			t.Fatalf("bob opening alice's dev URL: got %s, want 404", coderdtest.String(status, body))
		}
		record(t, "username:bob outcome:failure", auditWant{actor: "bob", action: codersdk.AuditActionConnect, resourceType: codersdk.AuditResourceWorkspaceAgent,
			workspace: "alice/dev", status: http.StatusNotFound, fields: map[string]any{"kind": "ssh", "error": "Workspace agent not found"}})
		record(t, "username:bob outcome:failure", auditWant{actor: "bob", action: codersdk.AuditActionConnect, resourceType: codersdk.AuditResourceWorkspaceAgent,
			workspace: "alice/dev", status: http.StatusNotFound, fields: map[string]any{"kind": "dev-url"}})
	})
}

// relayFixture is a deployment with users alice (whose workspace "dev" has
// a connected agent) and bob, and an HTTP app on the workspace's loopback
// that closes each connection after one answer (so that a relayed
// connection's record is written at once).
type relayFixture struct {
	d            *coderdtest.Deployment
	owner, alice *codersdk.Client
	bob          *codersdk.Client
	agentID      string
	appPort      int
}

func newRelayFixture(t *testing.T) relayFixture {
	t.Helper()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		fmt.Fprintf(w, "hello from %s\n", r.URL.Path)
	}))
	t.Cleanup(app.Close)
	_, portStr, _ := net.SplitHostPort(app.Listener.Addr().String())
	appPort, _ := strconv.Atoi(portStr)

	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk", AgentHeartbeatInterval: 200 * time.Millisecond, AgentKeepAliveInterval: time.Second})
	owner, _ := d.CreateFirstUser(t)
	alice, _ := d.CreateUser(t, owner, "alice")
	bob, _ := d.CreateUser(t, owner, "bob")
	daemon := d.NewDaemon(t, "test", nil)
	token := uuid.NewString()
	w := coderdtest.CreateWorkspaceWithAgent(t, owner, alice, daemon, "dev", codersdk.ProvisionedAgent{Token: token, Directory: t.TempDir()})
	agentID := coderdtest.WorkspaceAgent(t, w).ID
	startAgent(t, d, token)
	testagent.WaitConnected(t, alice, agentID)
	return relayFixture{d: d, owner: owner, alice: alice, bob: bob, agentID: agentID, appPort: appPort}
}

// startAgent runs a workspace agent with token in this process until the
// test ends (over HTTPS too: d.Client trusts the deployment's certificate).
func startAgent(t *testing.T, d *coderdtest.Deployment, token string) {
	t.Helper()
	c := d.Client()
	c.SessionToken = token
	testagent.Start(t, agent.Options{Client: c})
}
