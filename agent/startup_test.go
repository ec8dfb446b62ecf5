package agent_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/agent"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/codersdk"
)

// TestStartupScriptOutcomes runs agents whose startup scripts succeed, fail
// and run too long, and checks the lifecycle each reports.
func TestStartupScriptOutcomes(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk"})
	admin, _ := d.CreateFirstUser(t)
	psk := d.Client()
	psk.ProvisionerPSK = "psk"
	daemon := coderdtest.NewDaemon(t, psk, "test", nil)
	for _, tc := range []struct {
		name, script string
		timeout      time.Duration
		want         string
		wantLog      string
	}{
		{"none", "", 0, codersdk.AgentLifecycleReady, ""},
		{"ok", "echo fine", 0, codersdk.AgentLifecycleReady, "fine"},
		{"fails", "echo failing; exit 3", 0, codersdk.AgentLifecycleStartError, "coder agent: the startup script exited with code 3"},
		{"slow", "sleep 30", 300 * time.Millisecond, codersdk.AgentLifecycleStartTimeout, "coder agent: the startup script ran longer than 300ms and was stopped"},
	} {
		token := uuid.NewString()
		w := coderdtest.CreateWorkspaceWithAgent(t, admin, admin, daemon, tc.name, codersdk.ProvisionedAgent{Token: token, StartupScript: tc.script})
		agentID := coderdtest.WorkspaceAgent(t, w).ID
		c := codersdk.New(d.URL)
		c.SessionToken = token
		a, err := agent.New(agent.Options{Client: c, StartupScriptTimeout: tc.timeout, PortsInterval: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = a.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-done
		})
		waitFor(t, 20*time.Second, func() (bool, string) {
			ag, err := admin.WorkspaceAgent(context.Background(), agentID)
			if err != nil {
				return false, err.Error()
			}
			logs, err := admin.WorkspaceAgentLogs(context.Background(), agentID, 0)
			if err != nil {
				return false, err.Error()
			}
			var lines []string
			for _, l := range logs {
				lines = append(lines, l.Output)
			}
			hasLog := tc.wantLog == "" || slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, tc.wantLog) })
			return ag.LifecycleState == tc.want && hasLog,
				fmt.Sprintf("%s: lifecycle %s (want %s), logs %s", tc.name, ag.LifecycleState, tc.want, strings.Join(lines, " | "))
		})
	}
}
