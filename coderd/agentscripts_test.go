package coderd_test

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// richAgent is a coder_agent as the provisioner reports it from a template
// on the official provider: env merged with coder_env, its startup and
// shutdown scripts converted, a coder_script, metadata blocks and apps.
func richAgent() codersdk.ProvisionedAgent {
	return codersdk.ProvisionedAgent{
		Token: uuid.NewString(), Directory: "~/src", Env: map[string]string{"EDITOR": "vim", "FROM_CODER_ENV": "1"},
		Scripts: []codersdk.AgentScript{
			{DisplayName: codersdk.ScriptStartupDisplayName, Script: "make run", RunOnStart: true, StartBlocksLogin: true},
			{DisplayName: codersdk.ScriptShutdownDisplayName, Script: "make stop", RunOnStop: true},
			{DisplayName: "Install tools", Icon: "/icon/tools.svg", Script: "install.sh", RunOnStart: true, TimeoutSeconds: 300, LogPath: "tools.log"},
			{DisplayName: "Backup", Script: "backup.sh", Cron: "0 0 * * * *"},
		},
		Metadata: []codersdk.AgentMetadataDescription{
			{Key: "mem", DisplayName: "Memory", Script: "coder stat mem", IntervalSeconds: 10, TimeoutSeconds: 1, Order: 2},
			{Key: "cpu", DisplayName: "CPU", Script: "coder stat cpu", IntervalSeconds: 5, TimeoutSeconds: 1, Order: 1},
		},
		TroubleshootingURL: "https://wiki.example.com/agents", MOTDFile: "/etc/motd", Order: 3,
		DisplayApps: &codersdk.DisplayApps{VSCode: true, WebTerminal: true, SSHHelper: false, PortForwardingHelper: true},
		Apps: []codersdk.ProvisionedApp{
			{
				Slug: "web", DisplayName: "Web", URL: "http://localhost:8080", Icon: "/icon/web.svg", Share: "authenticated", Subdomain: true,
				Group: "Dev", Order: 2, OpenIn: "tab", Tooltip: "the app",
				Healthcheck: &codersdk.AppHealthcheck{URL: "http://localhost:8080/healthz", Interval: 5, Threshold: 6},
			},
			{Slug: "shell", DisplayName: "Shell", Command: "bash", Hidden: true, Order: 1},
			{Slug: "docs", DisplayName: "Docs", URL: "https://docs.example.com", External: true},
		},
	}
}

func TestResourcesAndAgentManifest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk"})
	admin, _ := d.CreateFirstUser(t)
	alice, _ := d.CreateUser(t, admin, "alice")
	daemon := d.NewDaemon(t, "res", nil)
	tpl := coderdtest.CreateTemplate(t, admin, daemon, "res", coderdtest.MinimalTemplate, nil)
	w, err := alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	pa := richAgent()
	daemon.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`), Resources: []codersdk.ProvisionedResource{
		{Type: "docker_container", Name: "workspace", Icon: "/icon/docker.svg", DailyCost: 12, Agents: []codersdk.ProvisionedAgent{pa},
			Metadata: []codersdk.WorkspaceResourceMetadata{{Key: "image", Value: "ubuntu:24.04"}, {Key: "password", Value: "hunter2", Sensitive: true}}},
		{Type: "docker_volume", Name: "home", Hide: true},
	}})
	if w, err = alice.Workspace(ctx, w.ID); err != nil {
		t.Fatal(err)
	}

	t.Run("resources", func(t *testing.T) {
		rs := w.LatestBuild.Resources
		if len(rs) != 2 {
			t.Fatalf("resources: got %d, want 2", len(rs))
		}
		byName := map[string]codersdk.WorkspaceResource{}
		for _, r := range rs {
			byName[r.Name] = r
		}
		c := byName["workspace"]
		if c.Icon != "/icon/docker.svg" || c.DailyCost != 12 || c.Hide {
			t.Errorf("container: got icon %q cost %d hide %v, want /icon/docker.svg 12 false", c.Icon, c.DailyCost, c.Hide)
		}
		want := []codersdk.WorkspaceResourceMetadata{{Key: "image", Value: "ubuntu:24.04"}, {Key: "password", Value: "", Sensitive: true}}
		if len(c.Metadata) != 2 || c.Metadata[0] != want[0] || c.Metadata[1] != want[1] {
			t.Errorf("container metadata: got %+v, want %+v", c.Metadata, want)
		}
		if !byName["home"].Hide {
			t.Errorf("volume: got hide false, want true")
		}
		// Not through any other view either.
		status, body := coderdtest.Do(t, http.MethodGet, d.URL.String()+"/api/v2/workspaces/"+w.ID+"/builds", alice.SessionToken, nil, "")
		if status != http.StatusOK || strings.Contains(string(body), "hunter2") {
			t.Errorf("builds list: got %d with the sensitive value %v, want 200 without it", status, strings.Contains(string(body), "hunter2"))
		}
	})

	agent := coderdtest.WorkspaceAgent(t, w)
	t.Run("agent in the API", func(t *testing.T) {
		a, err := alice.WorkspaceAgent(ctx, agent.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range []codersdk.WorkspaceAgent{agent, a} {
			if got.TroubleshootingURL != pa.TroubleshootingURL || got.Order != 3 || !maps.Equal(got.Env, pa.Env) {
				t.Errorf("agent: got troubleshooting %q order %d env %v, want %q 3 %v", got.TroubleshootingURL, got.Order, got.Env, pa.TroubleshootingURL, pa.Env)
			}
			if got.DisplayApps == nil || *got.DisplayApps != *pa.DisplayApps {
				t.Errorf("display apps: got %+v, want %+v", got.DisplayApps, pa.DisplayApps)
			}
			if len(got.Scripts) != 4 || got.Scripts[2].DisplayName != "Install tools" || got.Scripts[2].TimeoutSeconds != 300 || got.Scripts[3].Cron != "0 0 * * * *" {
				t.Errorf("scripts: got %+v", got.Scripts)
			}
			if len(got.Metadata) != 2 || got.Metadata[0].Description.Key != "cpu" || got.Metadata[1].Description.DisplayName != "Memory" {
				t.Errorf("metadata: got %+v, want cpu then mem (by order)", got.Metadata)
			}
			if len(got.Apps) != 3 {
				t.Fatalf("apps: got %+v, want 3", got.Apps)
			}
			// Apps come by order, then slug.
			docs, shell, web := got.Apps[0], got.Apps[1], got.Apps[2]
			if shell.Slug != "shell" || shell.Command != "bash" || !shell.Hidden {
				t.Errorf("shell app: got %+v", shell)
			}
			if docs.Slug != "docs" || !docs.External || docs.URL != "https://docs.example.com" {
				t.Errorf("docs app: got %+v", docs)
			}
			if web.Slug != "web" || !web.Subdomain || web.Share != "authenticated" || web.Icon != "/icon/web.svg" || web.Group != "Dev" ||
				web.Order != 2 || web.OpenIn != "tab" || web.Tooltip != "the app" || web.Healthcheck == nil || *web.Healthcheck != *pa.Apps[0].Healthcheck {
				t.Errorf("web app: got %+v (healthcheck %+v)", web, web.Healthcheck)
			}
		}
	})

	t.Run("dev URLs of apps without one", func(t *testing.T) {
		for slug, want := range map[string]string{"docs": "external", "shell": "runs a command"} {
			status, body := coderdtest.Do(t, http.MethodGet, d.URL.String()+"/@alice/dev/apps/"+slug+"/", alice.SessionToken, nil, "")
			if status != http.StatusBadRequest || !strings.Contains(string(body), want) {
				t.Errorf("dev URL of app %s: got %s, want 400 saying %q", slug, coderdtest.String(status, body), want)
			}
		}
	})

	h := d.Client()
	h.SessionToken = pa.Token
	m, err := h.AgentManifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("manifest", func(t *testing.T) {
		if m.AgentID != agent.ID || m.Directory != "~/src" || m.MOTDFile != "/etc/motd" || !maps.Equal(m.EnvironmentVariables, pa.Env) {
			t.Errorf("manifest: got %+v", m)
		}
		if len(m.Scripts) != 4 {
			t.Fatalf("manifest scripts: got %+v, want 4", m.Scripts)
		}
		ids := map[string]bool{}
		for i, s := range m.Scripts {
			if uuid.Validate(s.LogSourceID) != nil || ids[s.LogSourceID] {
				t.Errorf("script %s: got log source %q, want a UUID of its own", s.DisplayName, s.LogSourceID)
			}
			ids[s.LogSourceID] = true
			want := pa.Scripts[i]
			want.LogSourceID = s.LogSourceID
			if s != want {
				t.Errorf("script %d: got %+v, want %+v", i, s, want)
			}
		}
		if len(m.Metadata) != 2 || m.Metadata[0].Key != "mem" || m.Metadata[0].IntervalSeconds != 10 || m.Metadata[1].Script != "coder stat cpu" {
			t.Errorf("manifest metadata: got %+v", m.Metadata)
		}
		if len(m.Apps) != 3 {
			t.Errorf("manifest apps: got %+v, want 3", m.Apps)
		}
	})

	t.Run("metadata round trip", func(t *testing.T) {
		collected := time.Now().Add(-5 * time.Second)
		if err := h.PostAgentMetadata(ctx, codersdk.PostAgentMetadataRequest{Metadata: []codersdk.AgentMetadataUpdate{
			{Key: "cpu", Result: codersdk.AgentMetadataResult{CollectedAt: collected, Value: "42%"}},
			{Key: "mem", Result: codersdk.AgentMetadataResult{CollectedAt: collected, Value: strings.Repeat("m", 20<<10)}},
		}}); err != nil {
			t.Fatal(err)
		}
		// An older result does not replace a newer one.
		if err := h.PostAgentMetadata(ctx, codersdk.PostAgentMetadataRequest{Metadata: []codersdk.AgentMetadataUpdate{
			{Key: "cpu", Result: codersdk.AgentMetadataResult{CollectedAt: collected.Add(-time.Minute), Value: "stale"}},
		}}); err != nil {
			t.Fatal(err)
		}
		err := h.PostAgentMetadata(ctx, codersdk.PostAgentMetadataRequest{Metadata: []codersdk.AgentMetadataUpdate{{Key: "disk", Result: codersdk.AgentMetadataResult{Value: "1"}}}})
		if !codersdk.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), `"disk"`) {
			t.Errorf("undeclared key: got %v, want 400 naming it", err)
		}
		if err := alice.PostAgentMetadata(ctx, codersdk.PostAgentMetadataRequest{}); !codersdk.IsStatus(err, http.StatusUnauthorized) {
			t.Errorf("a user posting metadata: got %v, want 401", err)
		}
		a, err := alice.WorkspaceAgent(ctx, agent.ID)
		if err != nil {
			t.Fatal(err)
		}
		cpu, mem := a.Metadata[0], a.Metadata[1]
		if cpu.Description.Key != "cpu" || cpu.Result.Value != "42%" || cpu.Result.Error != "" || cpu.Result.Age < 5 || cpu.Result.Age > 60 {
			t.Errorf("cpu: got %+v, want 42%% aged 5s or a little more", cpu)
		}
		if !cpu.Result.CollectedAt.Equal(collected.Truncate(time.Microsecond)) {
			t.Errorf("cpu collected at: got %v, want %v", cpu.Result.CollectedAt, collected)
		}
		if len(mem.Result.Value) != 10<<10 || !strings.Contains(mem.Result.Error, "exceeded") {
			t.Errorf("oversized mem: got %d bytes, error %q, want 10 KiB and an error saying it was cut", len(mem.Result.Value), mem.Result.Error)
		}
		w, err := alice.Workspace(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got := coderdtest.WorkspaceAgent(t, w).Metadata; len(got) != 2 || got[0].Result.Value != "42%" {
			t.Errorf("workspace's agent metadata: got %+v", got)
		}
	})

	t.Run("script logs", func(t *testing.T) {
		src := map[string]string{}
		for _, s := range m.Scripts {
			src[s.DisplayName] = s.LogSourceID
		}
		now := time.Now()
		if err := h.PostAgentLogs(ctx, codersdk.PostAgentLogsRequest{Logs: []codersdk.AgentLogInput{
			{CreatedAt: now, Output: "starting", Source: src[codersdk.ScriptStartupDisplayName]},
			{CreatedAt: now, Output: "tools installed", Source: src["Install tools"]},
			{CreatedAt: now, Output: "backed up", Source: src["Backup"]},
			{CreatedAt: now, Output: "bye", Source: src[codersdk.ScriptShutdownDisplayName]},
			{CreatedAt: now, Output: "from the agent"},
		}}); err != nil {
			t.Fatal(err)
		}
		err := h.PostAgentLogs(ctx, codersdk.PostAgentLogsRequest{Logs: []codersdk.AgentLogInput{{Output: "x", Source: uuid.NewString()}}})
		if !codersdk.IsStatus(err, http.StatusBadRequest) {
			t.Errorf("unknown log source: got %v, want 400", err)
		}
		logs, err := alice.WorkspaceAgentLogs(ctx, agent.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, l := range logs {
			got[l.Output] = l.Source
		}
		want := map[string]string{"starting": codersdk.ScriptStartupDisplayName, "tools installed": "Install tools", "backed up": "Backup",
			"bye": codersdk.ScriptShutdownDisplayName, "from the agent": ""}
		if !maps.Equal(got, want) {
			t.Errorf("agent log sources: got %v, want %v", got, want)
		}
		var jobLogs []codersdk.ProvisionerJobLog
		if err := alice.WorkspaceBuildLogs(ctx, w.LatestBuild.ID, 0, false, func(l codersdk.ProvisionerJobLog) error {
			if l.Source == codersdk.LogSourceAgent {
				jobLogs = append(jobLogs, l)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		stages := map[string]string{}
		for _, l := range jobLogs {
			stages[l.Output] = l.Stage
		}
		// Only run-on-start scripts (and source-less lines) reach the build's logs.
		wantStages := map[string]string{"starting": codersdk.StageStartupScript, "tools installed": "Install tools", "from the agent": codersdk.StageStartupScript}
		if !maps.Equal(stages, wantStages) {
			t.Errorf("build log stages: got %v, want %v", stages, wantStages)
		}
	})
}
