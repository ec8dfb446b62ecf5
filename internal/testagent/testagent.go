// Package testagent runs workspace agents inside a test process and waits
// for a deployment to see them. It owns the test-side plumbing only: the
// agent is package agent, the deployment it connects to is coderdtest's, and
// the workspace whose agent it is is built by the test.
//
// An agent started here connects with the quick reconnects and keep-alives a
// test wants, and its Run is waited for before the test ends, so that no
// agent outlives the test that started it.
package testagent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"airgapcoder/agent"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// Version is the version agents started by [Start] report unless
// agent.Options.Version says otherwise.
const Version = "v9.9.9-test"

// connectTimeout only guards against a hung test; no assertion depends on it.
const connectTimeout = 30 * time.Second

// Start runs an agent with opts until the test ends, or until stop is
// called; stop ends the agent, waits for Run to return and may be called
// more than once. opts.Client (its URL and the agent's token) is required.
// Zero fields get a test's values: Version [Version], KeepAliveInterval one
// second, ReconnectMin 100ms and ReconnectMax one second; the rest keep the
// agent's defaults (a nil Logger discards). Run returning an error fails the
// test.
func Start(t testing.TB, opts agent.Options) (stop func()) {
	t.Helper()
	if opts.Client == nil {
		t.Fatal("testagent: Options.Client is required")
	}
	if opts.Version == "" {
		opts.Version = Version
	}
	if opts.KeepAliveInterval == 0 {
		opts.KeepAliveInterval = time.Second
	}
	if opts.ReconnectMin == 0 {
		opts.ReconnectMin = 100 * time.Millisecond
	}
	if opts.ReconnectMax == 0 {
		opts.ReconnectMax = time.Second
	}
	a, err := agent.New(opts)
	if err != nil {
		t.Fatalf("testagent: new agent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx); err != nil {
			t.Errorf("testagent: agent run: %v", err)
		}
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// WaitStatus waits until c sees agent agentID with status, one of the
// codersdk.AgentStatus values.
func WaitStatus(t testing.TB, c *codersdk.Client, agentID, status string) {
	t.Helper()
	testwait.For(t, connectTimeout, "agent "+agentID+" "+status, func() (bool, string) {
		a, err := c.WorkspaceAgent(context.Background(), agentID)
		if err != nil {
			return false, err.Error()
		}
		return a.Status == status, fmt.Sprintf("agent status %s, want %s", a.Status, status)
	})
}

// WaitConnected waits until c sees agent agentID connected.
func WaitConnected(t testing.TB, c *codersdk.Client, agentID string) {
	t.Helper()
	WaitStatus(t, c, agentID, codersdk.AgentStatusConnected)
}

// WaitReady waits until c sees agent agentID connected and its lifecycle
// ready: its start scripts ran and their reports came through.
func WaitReady(t testing.TB, c *codersdk.Client, agentID string) {
	t.Helper()
	testwait.For(t, connectTimeout, "agent "+agentID+" connected and ready", func() (bool, string) {
		a, err := c.WorkspaceAgent(context.Background(), agentID)
		if err != nil {
			return false, err.Error()
		}
		return a.Status == codersdk.AgentStatusConnected && a.LifecycleState == codersdk.AgentLifecycleReady,
			fmt.Sprintf("status %s, lifecycle %s", a.Status, a.LifecycleState)
	})
}
