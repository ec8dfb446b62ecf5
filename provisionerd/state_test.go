package provisionerd_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"airgapcoder/codersdk"
)

const allKindsTemplate = coderTF + `
data "coder_workspace" "me" {}

resource "coder_agent" "dev" {
  os                      = "linux"
  arch                    = "amd64"
  dir                     = "/home/dev"
  env                     = { EDITOR = "vim", SHARED = "from-agent" }
  startup_script          = "echo start"
  startup_script_behavior = "blocking"
  shutdown_script         = "echo stop"
  connection_timeout      = 300
  troubleshooting_url     = "https://docs.example.test/troubleshoot"
  motd_file               = "/etc/motd"
  order                   = 2
  metadata {
    key          = "cpu"
    display_name = "CPU"
    script       = "nproc"
    interval     = 10
    timeout      = 2
    order        = 1
  }
  display_apps {
    vscode                 = false
    vscode_insiders        = true
    web_terminal           = true
    ssh_helper             = false
    port_forwarding_helper = true
  }
}

# Nothing runs this agent's init script: it gets a resource of its own.
resource "coder_agent" "lonely" {
  os   = "darwin"
  arch = "arm64"
}

resource "coder_app" "web" {
  agent_id     = coder_agent.dev.id
  slug         = "web"
  display_name = "Web"
  url          = "http://localhost:8080"
  icon         = "/icon/web.svg"
  subdomain    = true
  share        = "authenticated"
  group        = "tools"
  order        = 3
  open_in      = "tab"
  tooltip      = "The **web** app"
  healthcheck {
    url       = "http://localhost:8080/healthz"
    interval  = 5
    threshold = 6
  }
}

resource "coder_app" "shell" {
  agent_id = coder_agent.dev.id
  slug     = "shell"
  command  = "htop"
  hidden   = true
}

resource "coder_app" "docs" {
  agent_id = coder_agent.dev.id
  slug     = "docs"
  url      = "https://docs.example.test"
  external = true
}

resource "coder_env" "tools_a" {
  agent_id = coder_agent.dev.id
  name     = "TOOLS"
  value    = "/opt/a"
}

resource "coder_env" "tools_b" {
  agent_id       = coder_agent.dev.id
  name           = "TOOLS"
  value          = "/opt/b"
  merge_strategy = "append"
}

resource "coder_env" "shared" {
  agent_id = coder_agent.dev.id
  name     = "SHARED"
  value    = "from-coder-env"
}

resource "coder_script" "backup" {
  agent_id     = coder_agent.dev.id
  display_name = "Backup"
  icon         = "/icon/backup.svg"
  script       = "backup.sh"
  cron         = "0 0 22 * * *"
  log_path     = "backup.log"
  timeout      = 60
}

resource "coder_script" "dotfiles" {
  agent_id           = coder_agent.dev.id
  display_name       = "Dotfiles"
  script             = "install.sh"
  run_on_start       = true
  start_blocks_login = true
}

# A volume: kept while the workspace is stopped.
resource "terraform_data" "home" {
  input = "home"
}

# The machine that runs the agent.
resource "terraform_data" "vm" {
  count = data.coder_workspace.me.start_count
  input = coder_agent.dev.init_script
}

# Depends on the agent only through the machine: it must not get the agent.
resource "terraform_data" "sidecar" {
  input = terraform_data.vm[*].id
}

resource "coder_metadata" "vm" {
  count       = data.coder_workspace.me.start_count
  resource_id = terraform_data.vm[0].id
  icon        = "/icon/vm.svg"
  daily_cost  = 42
  item {
    key   = "region"
    value = "eu"
  }
  item {
    key       = "password"
    value     = "hunter2"
    sensitive = true
  }
  item {
    key = "empty"
  }
}

resource "coder_metadata" "home" {
  resource_id = terraform_data.home.id
  hide        = true
}
`

// TestBuildReportsResources: every kind of coder_* resource in the applied
// state reaches coderd where it belongs.
func TestBuildReportsResources(t *testing.T) {
	f := newFakeCoderd(t)
	f.startDaemon(t, nil)
	files := map[string]string{"main.tf": allKindsTemplate}
	start := mustComplete(t, f.run(t, buildJob(codersdk.WorkspaceTransitionStart), files))

	var names []string
	for _, r := range start.Resources {
		names = append(names, r.Type+"."+r.Name)
	}
	wantNames := []string{"terraform_data.home", "terraform_data.sidecar", "terraform_data.vm[0]", "coder_agent.lonely"}
	if !reflect.DeepEqual(names, wantNames) {
		t.Fatalf("resources: got %v, want %v", names, wantNames)
	}
	home, sidecar, vm, lonely := start.Resources[0], start.Resources[1], start.Resources[2], start.Resources[3]
	if len(vm.Agents) != 1 {
		t.Fatalf("terraform_data.vm[0] agents: got %d, want 1 (dev)", len(vm.Agents))
	}
	dev := vm.Agents[0]
	attrs := stateAttrs(t, start.State)
	id := func(address string) string { return attrs[address]["id"] }
	cost := int32(42)

	tests := []struct {
		name      string
		got, want any
	}{
		{"agent id and token", []string{dev.ID, dev.Token}, []string{id("coder_agent.dev"), attrs["coder_agent.dev"]["token"]}},
		{"agent name", dev.Name, "dev"},
		{"agent platform", dev.OperatingSystem + "/" + dev.Architecture, "linux/amd64"},
		{"agent dir", dev.Directory, "/home/dev"},
		{"agent env: coder_env merged, the agent's own env wins", dev.Env, map[string]string{"EDITOR": "vim", "SHARED": "from-agent", "TOOLS": "/opt/a:/opt/b"}},
		{"agent connection timeout", dev.ConnectionTimeoutSeconds, int32(300)},
		{"agent troubleshooting url", dev.TroubleshootingURL, "https://docs.example.test/troubleshoot"},
		{"agent motd file", dev.MOTDFile, "/etc/motd"},
		{"agent order", dev.Order, int32(2)},
		{"agent metadata", dev.Metadata, []codersdk.AgentMetadataDescription{{Key: "cpu", DisplayName: "CPU", Script: "nproc", IntervalSeconds: 10, TimeoutSeconds: 2, Order: 1}}},
		{"agent display apps", dev.DisplayApps, &codersdk.DisplayApps{VSCodeInsiders: true, WebTerminal: true, PortForwardingHelper: true}},
		{"agent scripts", dev.Scripts, []codersdk.AgentScript{
			{LogSourceID: dev.ID + "-startup", DisplayName: "Startup Script", Script: "echo start", RunOnStart: true, StartBlocksLogin: true},
			{LogSourceID: dev.ID + "-shutdown", DisplayName: "Shutdown Script", Script: "echo stop", RunOnStop: true},
			{LogSourceID: id("coder_script.backup"), DisplayName: "Backup", Icon: "/icon/backup.svg", Script: "backup.sh", Cron: "0 0 22 * * *", LogPath: "backup.log", TimeoutSeconds: 60},
			{LogSourceID: id("coder_script.dotfiles"), DisplayName: "Dotfiles", Script: "install.sh", RunOnStart: true, StartBlocksLogin: true},
		}},
		{"apps", dev.Apps, []codersdk.ProvisionedApp{
			{Slug: "docs", URL: "https://docs.example.test", External: true, Share: "owner", OpenIn: "slim-window"},
			{Slug: "shell", Command: "htop", Hidden: true, Share: "owner", OpenIn: "slim-window"},
			{Slug: "web", DisplayName: "Web", URL: "http://localhost:8080", Icon: "/icon/web.svg", Subdomain: true, Share: "authenticated",
				Group: "tools", Order: 3, OpenIn: "tab", Tooltip: "The **web** app",
				Healthcheck: &codersdk.AppHealthcheck{URL: "http://localhost:8080/healthz", Interval: 5, Threshold: 6}},
		}},
		{"metadata of the agent's machine", []any{vm.Hide, vm.Icon, vm.DailyCost, vm.Metadata}, []any{false, "/icon/vm.svg", cost, []codersdk.WorkspaceResourceMetadata{
			{Key: "region", Value: "eu"}, {Key: "password", Value: "hunter2", Sensitive: true}, {Key: "empty"},
		}}},
		{"hidden volume", []any{home.Hide, len(home.Agents), len(home.Metadata)}, []any{true, 0, 0}},
		{"indirect dependant gets no agent", len(sidecar.Agents), 0},
		{"agent nothing runs", len(lonely.Agents) == 1 && lonely.Agents[0].Name == "lonely" && lonely.Agents[0].OperatingSystem == "darwin", true},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s: got %+v, want %+v", tt.name, pretty(tt.got), pretty(tt.want))
		}
	}

	// A stop build reports what is left, without agents.
	stop := buildJob(codersdk.WorkspaceTransitionStop)
	stop.State = start.State
	stopped := mustComplete(t, f.run(t, stop, files))
	names = nil
	for _, r := range stopped.Resources {
		names = append(names, r.Type+"."+r.Name)
		if len(r.Agents) > 0 {
			t.Errorf("stop build: %s.%s has agents", r.Type, r.Name)
		}
	}
	if want := []string{"terraform_data.home", "terraform_data.sidecar"}; !reflect.DeepEqual(names, want) {
		t.Errorf("stop build resources: got %v, want %v", names, want)
	}
}

// TestBuildEnvClash: merge_strategy "error" fails the build and names both
// coder_env resources.
func TestBuildEnvClash(t *testing.T) {
	f := newFakeCoderd(t)
	f.startDaemon(t, nil)
	msg := mustFail(t, f.run(t, buildJob(codersdk.WorkspaceTransitionStart), map[string]string{"main.tf": coderTF + `
resource "coder_agent" "dev" {
  os   = "linux"
  arch = "amd64"
}
resource "coder_env" "a" {
  agent_id = coder_agent.dev.id
  name     = "GOPATH"
  value    = "/go"
}
resource "coder_env" "b" {
  agent_id       = coder_agent.dev.id
  name           = "GOPATH"
  value          = "/other"
  merge_strategy = "error"
}
`}))
	for _, want := range []string{"coder_env.a", "coder_env.b", "GOPATH"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
}

// stateAttrs maps the addresses of a state's managed single-instance
// resources to their string attributes.
func stateAttrs(t *testing.T, state []byte) map[string]map[string]string {
	t.Helper()
	var st struct {
		Resources []struct {
			Mode, Type, Name string
			Instances        []struct {
				Attributes map[string]any `json:"attributes"`
			} `json:"instances"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(state, &st); err != nil {
		t.Fatal(err)
	}
	all := map[string]map[string]string{}
	for _, r := range st.Resources {
		if r.Mode != "managed" || len(r.Instances) != 1 {
			continue
		}
		attrs := map[string]string{}
		for k, v := range r.Instances[0].Attributes {
			if s, ok := v.(string); ok {
				attrs[k] = s
			}
		}
		all[r.Type+"."+r.Name] = attrs
	}
	return all
}

func pretty(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
