package coderd_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testwait"
)

// TestPreparedConnections: a prepared relay connection (what coder
// port-forward keeps ahead) connects when its target comes, is recorded
// like any relayed connection, leaves no record when it is never used, and
// checks its token again when used: a user suspended after preparing gets
// nothing, also when the suspension was made elsewhere (another replica,
// or SQL by hand). Bytes written right behind the target (Start) arrive
// once it is connected, and go nowhere when it is refused or its user was
// suspended since. Bad targets and
// other users' agents are refused.
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
	time.Sleep(200 * time.Millisecond) // paces the client: prepared ahead, as the CLI does, not a wait for the server
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
	time.Sleep(200 * time.Millisecond) // proves a negative: no record of the unused connection comes later
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

	// Suspended after preparing: refused when used, and nothing connected;
	// bytes written right behind the target reach nothing either.
	p, err = f.alice.PrepareWorkspaceAgentConn(ctx, f.agentID)
	if err != nil {
		t.Fatal(err)
	}
	withBytes, err := f.alice.PrepareWorkspaceAgentConn(ctx, f.agentID)
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
	sinkPort, received := byteSink(t)
	suspended, err := withBytes.Start(codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(sinkPort)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := suspended.Write([]byte("from a suspended user")); err != nil {
		t.Fatal(err)
	}
	if err := suspended.Answer(ctx); !codersdk.IsStatus(err, http.StatusUnauthorized) {
		t.Fatalf("prepared connection of a user suspended since, bytes behind its target: got %v, want 401", err)
	}
	time.Sleep(300 * time.Millisecond) // proves a negative: time for bytes that should not go to arrive
	if got := received(); got != "" {
		t.Errorf("the target of a user suspended since received %q, want nothing", got)
	}
	if _, err := f.owner.ActivateUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}

	// Bytes written right behind the target go out before coderd answers
	// and arrive once the target is connected.
	p, err = f.alice.PrepareWorkspaceAgentConn(ctx, f.agentID)
	if err != nil {
		t.Fatal(err)
	}
	started, err := p.Start(tcp)
	if err != nil {
		t.Fatal(err)
	}
	if got := getOver(t, started, "/early"); got != "hello from /early\n" {
		t.Errorf("GET written before coderd answered: got %q", got)
	}
	_ = started.Close()

	// Behind a target that refuses: the agent's reason, and a record of
	// the refusal.
	p, err = f.alice.PrepareWorkspaceAgentConn(ctx, f.agentID)
	if err != nil {
		t.Fatal(err)
	}
	closedPort := testport.Port(t)
	started, err = p.Start(codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(closedPort)})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(started, "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
	if err := started.Answer(ctx); !codersdk.IsStatus(err, http.StatusBadGateway) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("bytes behind a target nothing listens on: got %v, want 502 saying refused", err)
	}
	if _, err := started.Read(make([]byte, 1)); !codersdk.IsStatus(err, http.StatusBadGateway) {
		t.Errorf("read after a refusal: got %v, want the 502 again", err)
	}
	waitAudit(t, f.owner, "action:connect username:alice outcome:failure", auditWant{actor: "alice", action: codersdk.AuditActionConnect,
		resourceType: codersdk.AuditResourceWorkspaceAgent, workspace: "alice/dev", status: http.StatusBadGateway, fields: map[string]any{"kind": "tcp"}})

	// Suspended by SQL, not through this replica's API: the database
	// announces it (migration 000007's trigger), and the prepared
	// connection checks its token again.
	p, err = f.alice.PrepareWorkspaceAgentConn(ctx, f.agentID)
	if err != nil {
		t.Fatal(err)
	}
	setStatus := func(status string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, f.d.DatabaseURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `UPDATE users SET status = $1 WHERE username = 'alice'`, status); err != nil {
			t.Fatal(err)
		}
	}
	setStatus("suspended")
	defer setStatus("active")
	// The notification is on its way (about a millisecond); nothing the
	// test sees tells it arrived, and the prepared connection is used up
	// by the one Connect that checks it.
	time.Sleep(500 * time.Millisecond)
	if _, err := p.Connect(ctx, tcp); !codersdk.IsStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), "suspended") {
		t.Fatalf("prepared connection of a user suspended by SQL since: got %v, want 401 saying suspended", err)
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
	testwait.For(t, 10*time.Second, "the audit record of "+q, func() (bool, string) {
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

// byteSink listens on a loopback port and keeps every byte any connection
// sends it; received returns them so far.
func byteSink(t *testing.T) (port int, received func() string) {
	t.Helper()
	var mu sync.Mutex
	var got strings.Builder
	port = coderdtest.ServeTCP(t, func(c net.Conn) {
		b := make([]byte, 4<<10)
		for {
			n, err := c.Read(b)
			mu.Lock()
			got.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	})
	return port, func() string {
		mu.Lock()
		defer mu.Unlock()
		return got.String()
	}
}
