package coderd_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/codersdk"
)

// TestPreparedConnections: a prepared relay connection (what coder
// port-forward keeps ahead) connects when its target comes, is recorded
// like any relayed connection, leaves no record when it is never used, and
// checks its token again when used: a user suspended after preparing gets
// nothing. Bad targets and other users' agents are refused.
func TestPreparedConnections(t *testing.T) {
	ctx := context.Background()
	f := newRelayFixture(t)
	connectRecords := func() int { return len(auditLogs(t, f.owner, "action:connect username:alice")) }
	tcp := codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(f.appPort)}

	// Unused, then used: only the used one is recorded.
	before := connectRecords()
	unused, err := f.alice.PrepareWorkspaceAgentConn(ctx, f.agentID)
	if err != nil {
		t.Fatal(err)
	}
	_ = unused.Close()
	p, err := f.alice.PrepareWorkspaceAgentConn(ctx, f.agentID)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // prepared ahead, as the CLI does
	conn, err := p.Connect(ctx, tcp)
	if err != nil {
		t.Fatal(err)
	}
	if got := getOver(t, conn, "/prepared"); got != "hello from /prepared\n" {
		t.Errorf("GET through a prepared connection: got %q", got)
	}
	_ = conn.Close()
	l := waitAudit(t, f.owner, "action:connect username:alice outcome:success", auditWant{actor: "alice", action: codersdk.AuditActionConnect,
		resourceType: codersdk.AuditResourceWorkspaceAgent, workspace: "alice/dev", status: http.StatusSwitchingProtocols,
		fields: map[string]any{"kind": "tcp", "port": f.appPort}})
	if l.ResourceID != f.agentID {
		t.Errorf("record of a prepared connection: resource %q, want the agent %s", l.ResourceID, f.agentID)
	}
	time.Sleep(200 * time.Millisecond)
	if n := connectRecords(); n != before+1 {
		t.Errorf("connect records of alice: %d after one unused and one used prepared connection, want %d", n, before+1)
	}

	// A bad target is refused as /connect would refuse it.
	p, err = f.alice.PrepareWorkspaceAgentConn(ctx, f.agentID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Connect(ctx, codersdk.DialOptions{Kind: "udp", Port: 53}); !codersdk.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "kind: must be ssh or tcp") {
		t.Fatalf("prepared connection to kind udp: got %v, want 400 naming the kind", err)
	}
	waitAudit(t, f.owner, "action:connect username:alice outcome:failure", auditWant{actor: "alice", action: codersdk.AuditActionConnect,
		resourceType: codersdk.AuditResourceWorkspaceAgent, workspace: "alice/dev", status: http.StatusBadRequest, fields: map[string]any{"kind": "udp"}})

	// Only those who may connect may prepare.
	if _, err := f.bob.PrepareWorkspaceAgentConn(ctx, f.agentID); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("bob prepares a connection to alice's agent: got %v, want 404", err)
	}

	// Suspended after preparing: refused when used, and nothing connected.
	p, err = f.alice.PrepareWorkspaceAgentConn(ctx, f.agentID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.owner.SuspendUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Connect(ctx, tcp); !codersdk.IsStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), "suspended") {
		t.Fatalf("prepared connection of a user suspended since: got %v, want 401 saying suspended", err)
	}
	waitAudit(t, f.owner, "action:connect username:alice outcome:failure", auditWant{actor: "alice", action: codersdk.AuditActionConnect,
		resourceType: codersdk.AuditResourceWorkspaceAgent, workspace: "alice/dev", status: http.StatusUnauthorized, fields: map[string]any{"kind": "tcp"}})
	if _, err := f.owner.ActivateUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
}

// getOver sends GET path on conn and returns the answer's body.
func getOver(t *testing.T, conn net.Conn, path string) string {
	t.Helper()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// waitAudit waits for the record w describes among those of query q.
func waitAudit(t *testing.T, owner *codersdk.Client, q string, w auditWant) codersdk.AuditLog {
	t.Helper()
	var logs []codersdk.AuditLog
	waitUntil(t, 10*time.Second, func() (bool, string) {
		logs = auditLogs(t, owner, q)
		for _, l := range logs {
			if w.matches(l) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no record %s among %d of %q", w, len(logs), q)
	})
	return requireAudit(t, logs, w)
}
