package coderd_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/google/uuid"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// agentHarness is a deployment with a workspace of alice's whose agent is
// played by the test through the agent endpoints (no relay).
type agentHarness struct {
	d            *coderdtest.Deployment
	admin, alice *codersdk.Client
	member       *codersdk.Client
	agent        *codersdk.Client // authenticated by the agent token
	daemon       *coderdtest.Daemon
	workspace    codersdk.Workspace
	agentID      string
}

func newAgentHarness(t *testing.T, pa codersdk.ProvisionedAgent) *agentHarness {
	t.Helper()
	return newAgentHarnessOn(t, nil, pa)
}

// newAgentHarnessOn is newAgentHarness with coderd on clock (nil: the
// real clock).
func newAgentHarnessOn(t *testing.T, clock *quartz.Mock, pa codersdk.ProvisionedAgent) *agentHarness {
	t.Helper()
	h := &agentHarness{d: coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk", Clock: clock})}
	h.admin, _ = h.d.CreateFirstUser(t)
	h.alice, _ = h.d.CreateUser(t, h.admin, "alice")
	h.member, _ = h.d.CreateUser(t, h.admin, "member")
	h.daemon = h.d.NewDaemon(t, "test", nil)
	if pa.Token == "" {
		pa.Token = uuid.NewString()
	}
	h.workspace = coderdtest.CreateWorkspaceWithAgent(t, h.admin, h.alice, h.daemon, "dev", pa)
	h.agentID = coderdtest.WorkspaceAgent(t, h.workspace).ID
	h.agent = h.d.Client()
	h.agent.SessionToken = pa.Token
	return h
}

func TestAgentEndpoints(t *testing.T) {
	t.Parallel()
	clock := coderdtest.NewClock(t)
	h := newAgentHarnessOn(t, clock, codersdk.ProvisionedAgent{
		Directory: "~/src", Env: map[string]string{"A": "1"},
		Scripts: []codersdk.AgentScript{{DisplayName: codersdk.ScriptStartupDisplayName, Script: "make run", RunOnStart: true}},
		Apps:    []codersdk.ProvisionedApp{{Slug: "web", Port: 8080}},
	})
	ctx := context.Background()

	m, err := h.agent.AgentManifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.AgentID != h.agentID || m.WorkspaceName != "dev" || m.OwnerName != "alice" || m.Directory != "~/src" ||
		len(m.Scripts) != 1 || m.Scripts[0].Script != "make run" || m.EnvironmentVariables["A"] != "1" || len(m.Apps) != 1 || m.Apps[0].Port != 8080 {
		t.Errorf("manifest: %+v", m)
	}

	if err := h.agent.PostAgentStartup(ctx, codersdk.PostAgentStartupRequest{Version: "v1.2.3", OperatingSystem: "linux", Architecture: "arm64", ExpandedDirectory: "/home/alice/src"}); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.PostAgentLifecycle(ctx, codersdk.PostAgentLifecycleRequest{State: codersdk.AgentLifecycleStarting}); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.PostAgentLifecycle(ctx, codersdk.PostAgentLifecycleRequest{State: "sleepy"}); !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("unknown lifecycle state: got %v, want 400", err)
	}
	if err := h.agent.PostAgentPorts(ctx, codersdk.PostAgentPortsRequest{Ports: []codersdk.AgentListeningPort{{Network: "tcp", Port: 8080}, {Network: "tcp", Port: 22}}}); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.PostAgentPorts(ctx, codersdk.PostAgentPortsRequest{Ports: []codersdk.AgentListeningPort{{Network: "udp", Port: 53}}}); !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("a udp port: got %v, want 400", err)
	}
	if err := h.agent.PostAgentLogs(ctx, codersdk.PostAgentLogsRequest{Logs: []codersdk.AgentLogInput{
		{CreatedAt: time.Now(), Output: "line one"}, {CreatedAt: time.Now(), Level: codersdk.LogLevelError, Output: "line two"},
	}}); err != nil {
		t.Fatal(err)
	}

	a, err := h.alice.WorkspaceAgent(ctx, h.agentID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Version != "v1.2.3" || a.Architecture != "arm64" || a.ExpandedDirectory != "/home/alice/src" ||
		a.LifecycleState != codersdk.AgentLifecycleStarting || len(a.ListeningPorts) != 2 || a.Status != codersdk.AgentStatusConnecting {
		t.Errorf("agent after its reports: %+v", a)
	}
	logs, err := h.alice.WorkspaceAgentLogs(ctx, h.agentID, 0)
	if err != nil || len(logs) != 2 || logs[0].Output != "line one" || logs[0].Level != codersdk.LogLevelInfo || logs[1].Level != codersdk.LogLevelError {
		t.Errorf("agent logs: %+v, %v", logs, err)
	}
	if after, _ := h.alice.WorkspaceAgentLogs(ctx, h.agentID, logs[0].ID); len(after) != 1 {
		t.Errorf("logs after the first: %+v", after)
	}

	// The workspace's view carries the same report.
	w, err := h.alice.Workspace(ctx, h.workspace.ID)
	if err != nil {
		t.Fatal(err)
	}
	if wa := coderdtest.WorkspaceAgent(t, w); wa.Version != "v1.2.3" || len(wa.ListeningPorts) != 2 {
		t.Errorf("workspace's agent: %+v", wa)
	}

	// Others: another member sees nothing, the owner-role admin sees it.
	if _, err := h.member.WorkspaceAgent(ctx, h.agentID); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("another member: got %v, want 404", err)
	}
	if _, err := h.admin.WorkspaceAgent(ctx, h.agentID); err != nil {
		t.Errorf("owner-role admin: %v", err)
	}
	if _, err := h.alice.WorkspaceAgent(ctx, "not-a-uuid"); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("bad agent id: got %v, want 404", err)
	}
	// Not connected: dialing waits agentReconnectWait (10 s on coderd's
	// clock) for the agent of a running workspace to connect, not 1 ms
	// less, then says so, with 503 (clients wait and retry).
	clockCtx := coderdtest.ClockContext(t)
	trap := clock.Trap().NewTimer("coderd", "agentReconnect")
	dialed := make(chan error, 1)
	go func() {
		_, err := h.alice.DialWorkspaceAgent(ctx, h.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindSSH})
		dialed <- err
	}()
	call, err := trap.Wait(clockCtx)
	if err != nil {
		t.Fatalf("the dial did not wait for the agent: %v", err)
	}
	call.MustRelease(clockCtx)
	trap.Close()
	if call.Duration != 10*time.Second {
		t.Errorf("the dial waits %s for the agent, want 10s", call.Duration)
	}
	coderdtest.AdvanceClock(clockCtx, t, clock, call.Duration-time.Millisecond)
	select {
	case err := <-dialed:
		t.Fatalf("the dial answered 1 ms before its wait ended: %v", err)
	default:
	}
	coderdtest.AdvanceClock(clockCtx, t, clock, time.Millisecond)
	select {
	case err = <-dialed:
	case <-clockCtx.Done():
		t.Fatal("the dial did not answer once its wait ended")
	}
	if !codersdk.IsAgentUnavailable(err) || !strings.Contains(err.Error(), "not connected") {
		t.Errorf("dial an agent that never connected: got %v, want 503 not connected", err)
	}
	_, err = h.alice.DialWorkspaceAgent(ctx, h.agentID, codersdk.DialOptions{Kind: "telnet"})
	if !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("dial an unknown kind: got %v, want 400", err)
	}
	status, body := coderdtest.Do(t, http.MethodGet, h.d.URL.String()+"/@alice/dev/apps/web/", h.alice.SessionToken, nil, "")
	if status != http.StatusServiceUnavailable {
		t.Errorf("dev URL of an agent that never connected: %s, want 503", coderdtest.String(status, body))
	}
}

func TestAgentLogsCap(t *testing.T) {
	t.Parallel()
	h := newAgentHarness(t, codersdk.ProvisionedAgent{})
	ctx := context.Background()
	line := strings.Repeat("x", 1000)
	var err error
	sent := 0
	for i := 0; i < 2000 && err == nil; i++ {
		batch := make([]codersdk.AgentLogInput, 100)
		for j := range batch {
			batch[j] = codersdk.AgentLogInput{CreatedAt: time.Now(), Output: line}
		}
		if err = h.agent.PostAgentLogs(ctx, codersdk.PostAgentLogsRequest{Logs: batch}); err == nil {
			sent += len(batch) * len(line)
		}
	}
	if !codersdk.IsStatus(err, http.StatusRequestEntityTooLarge) {
		t.Fatalf("after %d bytes: got %v, want 413", sent, err)
	}
	if sent > 1<<20 || sent < 1<<20-100*len(line) {
		t.Errorf("stored %d bytes before the cap, want just under 1 MiB", sent)
	}
	// Even a small line is refused once full.
	err = h.agent.PostAgentLogs(ctx, codersdk.PostAgentLogsRequest{Logs: []codersdk.AgentLogInput{{Output: "x"}}})
	if !codersdk.IsStatus(err, http.StatusRequestEntityTooLarge) {
		t.Errorf("after the cap: got %v, want 413", err)
	}
}

func TestAgentConnectionTimeout(t *testing.T) {
	t.Parallel()
	h := newAgentHarness(t, codersdk.ProvisionedAgent{ConnectionTimeoutSeconds: 1})
	ctx := context.Background()
	testwait.For(t, 10*time.Second, "an agent that never connected within its 1s timeout shown as timeout", func() (bool, string) {
		a, err := h.alice.WorkspaceAgent(ctx, h.agentID)
		if err != nil {
			t.Fatal(err)
		}
		return a.Status == codersdk.AgentStatusTimeout, "status " + string(a.Status)
	})
}

// TestAgentTokenScope checks that agent and user tokens only work on their
// own endpoints, for every agent endpoint.
func TestAgentTokenScope(t *testing.T) {
	t.Parallel()
	h := newAgentHarness(t, codersdk.ProvisionedAgent{})
	base := h.d.URL.String() + "/api/v2"
	for _, ep := range []struct{ method, path string }{
		{http.MethodGet, "/workspaceagents/me/manifest"},
		{http.MethodPost, "/workspaceagents/me/startup"},
		{http.MethodPost, "/workspaceagents/me/lifecycle"},
		{http.MethodPost, "/workspaceagents/me/logs"},
		{http.MethodPost, "/workspaceagents/me/metadata"},
		{http.MethodPost, "/workspaceagents/me/ports"},
		{http.MethodPost, "/workspaceagents/me/app-health"},
		{http.MethodGet, "/workspaceagents/me/connect"},
	} {
		for _, tok := range []struct{ name, token string }{{"user", h.alice.SessionToken}, {"owner", h.admin.SessionToken}, {"none", ""}} {
			status, body := coderdtest.Do(t, ep.method, base+ep.path, tok.token, strings.NewReader("{}"), "application/json")
			if status != http.StatusUnauthorized {
				t.Errorf("%s %s with a %s token: %s, want 401", ep.method, ep.path, tok.name, coderdtest.String(status, body))
			}
		}
	}
	for _, path := range []string{"/users/me", "/workspaces", "/workspaceagents/" + h.agentID, fmt.Sprintf("/workspaceagents/%s/connect", h.agentID)} {
		status, body := coderdtest.Do(t, http.MethodGet, base+path, h.agent.SessionToken, nil, "")
		if status != http.StatusUnauthorized {
			t.Errorf("GET %s with the agent token: %s, want 401", path, coderdtest.String(status, body))
		}
	}
	status, body := coderdtest.Do(t, http.MethodGet, h.d.URL.String()+"/@alice/dev/apps/web/", h.agent.SessionToken, nil, "")
	if status != http.StatusUnauthorized {
		t.Errorf("dev URL with the agent token: %s, want 401", coderdtest.String(status, body))
	}
}
