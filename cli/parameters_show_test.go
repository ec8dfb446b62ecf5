package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"airgapcoder/codersdk"
)

// TestWriteWorkspace is the text of coder show: the build, each resource
// with its metadata (sensitive items masked), each agent with status,
// lifecycle, scripts and metadata values with their age or error, and the
// build's parameter values.
func TestWriteWorkspace(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	w := codersdk.Workspace{
		OwnerName: "admin", Name: "dev", TemplateName: "coder", Outdated: true,
		LatestBuild: codersdk.WorkspaceBuild{
			TemplateVersionName: "v1", BuildNumber: 3, Transition: codersdk.WorkspaceTransitionStart,
			Status: codersdk.WorkspaceStatusRunning, CreatedAt: now.Add(-2 * time.Minute),
			Job: codersdk.ProvisionerJob{Status: codersdk.ProvisionerJobSucceeded},
			Resources: []codersdk.WorkspaceResource{
				{Type: "terraform_data", Name: "agent", DailyCost: 5, Metadata: []codersdk.WorkspaceResourceMetadata{
					{Key: "home", Value: "/home/admin/dev"},
					{Key: "secret", Sensitive: true},
				}, Agents: []codersdk.WorkspaceAgent{{
					Name: "main", Status: codersdk.AgentStatusConnected, LifecycleState: codersdk.AgentLifecycleReady,
					OperatingSystem: "linux", Architecture: "amd64",
					Scripts: []codersdk.AgentScript{
						{DisplayName: "Setup", RunOnStart: true, StartBlocksLogin: true},
						{DisplayName: "Backup", Cron: "0 0 * * * *"},
						{DisplayName: "Shutdown Script", RunOnStop: true},
					},
					Metadata: []codersdk.AgentMetadata{
						{Description: codersdk.AgentMetadataDescription{Key: "cpu", DisplayName: "CPU parameter"},
							Result: codersdk.AgentMetadataResult{Value: "4 cores\n", CollectedAt: now.Add(-3 * time.Second), Age: 3}},
						{Description: codersdk.AgentMetadataDescription{Key: "mem"},
							Result: codersdk.AgentMetadataResult{Error: "coder: not found", CollectedAt: now.Add(-time.Second)}},
						{Description: codersdk.AgentMetadataDescription{Key: "disk", DisplayName: "Disk"}},
					},
				}}},
				{Type: "random_string", Name: "salt", Hide: true},
				{Type: "docker_volume", Name: "home"},
			},
			RichParameterValues: []codersdk.WorkspaceBuildParameter{
				{Name: "project", Value: "apollo"}, {Name: "tools", Value: `["git","go"]`},
			},
		},
	}
	var out bytes.Buffer
	writeWorkspace(&out, w, now)
	want := strings.Join([]string{
		"Workspace admin/dev (template coder, version v1)",
		"Outdated: the template has a newer active version; `coder update dev` builds with it",
		"Status: running (build #3, start, 2m0s ago)",
		"",
		"Resources:",
		"  terraform_data.agent (daily cost 5)",
		"    home: /home/admin/dev",
		"    secret: *****",
		"    agent main: connected, ready (linux/amd64)",
		`      scripts: Setup (on start, blocks login), Backup (cron "0 0 * * * *"), Shutdown Script (on stop)`,
		"      CPU parameter: 4 cores (3s ago)",
		"      mem: error: coder: not found (1s ago)",
		"      Disk: (no value yet)",
		"  docker_volume.home",
		"",
		"Parameters:",
		"  project: apollo",
		`  tools: ["git","go"]`,
		"",
	}, "\n")
	if out.String() != want {
		t.Errorf("coder show:\ngot:\n%s\nwant:\n%s", &out, want)
	}
}
