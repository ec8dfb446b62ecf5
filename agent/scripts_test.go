package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/ssh"

	"airgapcoder/agent"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testagent"
	"airgapcoder/internal/testwait"
)

// scriptEnv is a deployment whose admin owns workspaces built with the
// agents a test describes.
type scriptEnv struct {
	d      *coderdtest.Deployment
	admin  *codersdk.Client
	daemon *coderdtest.Daemon
}

func newScriptEnv(t *testing.T) *scriptEnv {
	t.Helper()
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk", AgentHeartbeatInterval: 200 * time.Millisecond, AgentKeepAliveInterval: time.Second})
	admin, _ := d.CreateFirstUser(t)
	return &scriptEnv{d: d, admin: admin, daemon: d.NewDaemon(t, "test", nil)}
}

// workspace builds a workspace with agent pa and runs its agent in this
// process; stop ends the agent and waits for it.
func (e *scriptEnv) workspace(t *testing.T, name string, pa codersdk.ProvisionedAgent, opts agent.Options) (agentID string, stop func()) {
	t.Helper()
	pa.Token = uuid.NewString()
	w := coderdtest.CreateWorkspaceWithAgent(t, e.admin, e.admin, e.daemon, name, pa)
	agentID = coderdtest.WorkspaceAgent(t, w).ID
	c := codersdk.New(e.d.URL)
	c.SessionToken = pa.Token
	opts.Client, opts.PortsInterval = c, -1
	opts.ReconnectMin, opts.ReconnectMax = 100*time.Millisecond, time.Second
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	opts.LogDir, opts.ScriptDataDir = filepath.Join(dir, "logs"), filepath.Join(dir, "data")
	stop = testagent.Start(t, opts)
	return agentID, stop
}

// logLines returns the agent's output lines as "source: output".
func (e *scriptEnv) logLines(t *testing.T, agentID string) []string {
	t.Helper()
	logs, err := e.admin.WorkspaceAgentLogs(context.Background(), agentID, 0)
	if err != nil {
		t.Fatal(err)
	}
	lines := make([]string, len(logs))
	for i, l := range logs {
		lines[i] = l.Source + ": " + l.Output
	}
	return lines
}

// TestScriptOutcomes runs agents whose start scripts succeed, fail and run
// too long, and checks the lifecycle each reports and what their logs say.
func TestScriptOutcomes(t *testing.T) {
	t.Parallel()
	e := newScriptEnv(t)
	startup := func(script string, timeout int32) []codersdk.AgentScript {
		return []codersdk.AgentScript{{DisplayName: codersdk.ScriptStartupDisplayName, RunOnStart: true, Script: script, TimeoutSeconds: timeout}}
	}
	for _, tc := range []struct {
		name    string
		scripts []codersdk.AgentScript
		want    string
		wantLog string
	}{
		{"none", nil, codersdk.AgentLifecycleReady, ""},
		{"ok", startup("echo fine", 0), codersdk.AgentLifecycleReady, "Startup Script: fine"},
		{"fails", startup("echo failing; exit 3", 0), codersdk.AgentLifecycleStartError, "Startup Script: coder agent: Startup Script exited with code 3"},
		{"slow", startup("sleep 30", 1), codersdk.AgentLifecycleStartTimeout, "Startup Script: coder agent: Startup Script ran longer than its timeout of 1s and was stopped"},
		{"one-of-two-fails", []codersdk.AgentScript{
			{DisplayName: "Good", RunOnStart: true, Script: "echo good"},
			{DisplayName: "Bad", RunOnStart: true, Script: "exit 1"},
		}, codersdk.AgentLifecycleStartError, "Bad: coder agent: Bad exited with code 1"},
	} {
		agentID, _ := e.workspace(t, tc.name, codersdk.ProvisionedAgent{Scripts: tc.scripts}, agent.Options{})
		testwait.For(t, 20*time.Second, "the scripts' outcome in the agent's state", func() (bool, string) {
			ag, err := e.admin.WorkspaceAgent(context.Background(), agentID)
			if err != nil {
				return false, err.Error()
			}
			lines := e.logLines(t, agentID)
			hasLog := tc.wantLog == "" || slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, tc.wantLog) })
			return ag.LifecycleState == tc.want && hasLog,
				fmt.Sprintf("%s: lifecycle %s (want %s), logs %q", tc.name, ag.LifecycleState, tc.want, lines)
		})
	}
}

// TestScriptsAndMetadata runs a workspace the way a template for Coder
// describes it (a blocking startup script, a cron coder_script, a shutdown
// script, metadata blocks, coder_env) and checks what its user sees.
func TestScriptsAndMetadata(t *testing.T) {
	t.Parallel()
	e := newScriptEnv(t)
	dir := t.TempDir()
	agentID, stopAgent := e.workspace(t, "dev", codersdk.ProvisionedAgent{
		Directory: dir,
		Env:       map[string]string{"FROM_TEMPLATE": "yes"},
		Scripts: []codersdk.AgentScript{
			// Blocks login until the test lets it finish.
			{DisplayName: codersdk.ScriptStartupDisplayName, RunOnStart: true, StartBlocksLogin: true, TimeoutSeconds: 60,
				Script: `while [ ! -e go ]; do sleep 0.05; done; echo "installed $FROM_TEMPLATE" > tool; echo startup done`},
			{DisplayName: "Tick", Cron: "* * * * * *", Script: "echo tick"},
			{DisplayName: codersdk.ScriptShutdownDisplayName, RunOnStop: true, TimeoutSeconds: 30,
				Script: `echo "bye $FROM_TEMPLATE"; touch stopped`},
		},
		Metadata: []codersdk.AgentMetadataDescription{
			{Key: "hello", DisplayName: "Hello", Script: `echo "$FROM_TEMPLATE from $(pwd)"`, IntervalSeconds: 1},
			{Key: "fails", DisplayName: "Fails", Script: "exit 3", IntervalSeconds: 1},
			{Key: "slow", DisplayName: "Slow", Script: "sleep 30", IntervalSeconds: 5, TimeoutSeconds: 1},
		},
	}, agent.Options{})

	// An SSH command waits for the blocking startup script, saying so.
	var client *ssh.Client
	testwait.For(t, 20*time.Second, "an SSH session while the startup script blocks", func() (bool, string) {
		conn, err := e.admin.DialWorkspaceAgent(context.Background(), agentID, codersdk.DialOptions{Kind: codersdk.RelayKindSSH})
		if err != nil {
			return false, err.Error()
		}
		sconn, chans, reqs, err := ssh.NewClientConn(conn, "dev", &ssh.ClientConfig{User: "admin", HostKeyCallback: ssh.InsecureIgnoreHostKey()})
		if err != nil {
			return false, err.Error()
		}
		client = ssh.NewClient(sconn, chans, reqs)
		return true, ""
	})
	t.Cleanup(func() { _ = client.Close() })
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncbuf.Buffer
	sess.Stdout, sess.Stderr = &stdout, &stderr
	if err := sess.Start("cat tool"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the SSH command saying it waits for the startup scripts", func() (bool, string) {
		return strings.Contains(stderr.String(), "coder agent: waiting for the workspace's startup scripts to finish"), fmt.Sprintf("stderr %q", stderr.String())
	})
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sess.Wait(); err != nil {
		var ee *ssh.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
	}
	if got := stdout.String(); got != "installed yes\n" {
		t.Errorf("the SSH command's output: got %q, want the blocking script's file", got)
	}
	sess.Close()

	// The agent is ready; the cron script ran at least twice; metadata
	// values, errors and timeouts arrive.
	testwait.For(t, 20*time.Second, "ready, two cron runs and the metadata", func() (bool, string) {
		ag, err := e.admin.WorkspaceAgent(context.Background(), agentID)
		if err != nil {
			return false, err.Error()
		}
		results := map[string]codersdk.AgentMetadataResult{}
		for _, m := range ag.Metadata {
			results[m.Description.Key] = m.Result
		}
		lines := e.logLines(t, agentID)
		ok := ag.LifecycleState == codersdk.AgentLifecycleReady &&
			slices.Contains(lines, "Startup Script: startup done") &&
			agent.CountLines(lines, "Tick: tick") >= 2 &&
			results["hello"].Value == "yes from "+dir &&
			results["fails"].Error == "exit status 3" &&
			results["slow"].Error == "timed out after 1s"
		return ok, fmt.Sprintf("lifecycle %s, metadata %+v, logs %q", ag.LifecycleState, results, lines)
	})
	if lines := e.logLines(t, agentID); slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "Shutdown Script:") }) {
		t.Fatalf("the shutdown script ran before the agent stopped: %q", lines)
	}

	// The shutdown script runs when the agent stops, before it reports off.
	stopAgent()
	if _, err := os.Stat(filepath.Join(dir, "stopped")); err != nil {
		t.Errorf("the shutdown script did not run: %v", err)
	}
	ag, err := e.admin.WorkspaceAgent(context.Background(), agentID)
	if err != nil {
		t.Fatal(err)
	}
	if ag.LifecycleState != codersdk.AgentLifecycleOff {
		t.Errorf("lifecycle after the agent stopped: %s, want off", ag.LifecycleState)
	}
	if lines := e.logLines(t, agentID); !slices.Contains(lines, "Shutdown Script: bye yes") {
		t.Errorf("agent logs %q lack the shutdown script's output", lines)
	}
}
