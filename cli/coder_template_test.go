package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// coderTemplate is written only against the official coder/coder provider,
// the way Coder's documentation writes templates: parameters of every type
// with validation, coder_env, two coder_scripts (one blocking login), agent
// metadata, a coder_app, coder_metadata with a sensitive item,
// data "coder_workspace_owner" and coder_workspace_tags routing the build
// to the provisioner of the chosen region. The agent runs as a process on
// the provisioner's host, like examples/templates/process.
const coderTemplate = `terraform {
  required_providers {
    coder = {
      source = "coder/coder"
    }
  }
}

data "coder_provisioner" "me" {}
data "coder_workspace" "me" {}
data "coder_workspace_owner" "me" {}

data "coder_parameter" "base_dir" {
  name    = "base_dir"
  type    = "string"
  mutable = false
}

data "coder_parameter" "project" {
  name         = "project"
  display_name = "Project"
  description  = "Lower-case project name; fixed for the workspace's life."
  type         = "string"
  mutable      = false
  order        = 1
  validation {
    regex = "^[a-z][a-z0-9-]*$"
    error = "project must be lower-case letters, digits and dashes"
  }
}

data "coder_parameter" "region" {
  name    = "region"
  type    = "string"
  default = "eu"
  mutable = true
  order   = 2
  option {
    name        = "Europe"
    description = "Frankfurt"
    value       = "eu"
  }
  option {
    name  = "United States"
    value = "us"
  }
}

data "coder_parameter" "cpu" {
  name    = "cpu"
  type    = "number"
  default = 2
  mutable = true
  order   = 3
  validation {
    min       = 1
    max       = 8
    monotonic = "increasing"
  }
}

data "coder_parameter" "gpu" {
  name    = "gpu"
  type    = "bool"
  default = false
  mutable = true
  order   = 4
}

data "coder_parameter" "tools" {
  name    = "tools"
  type    = "list(string)"
  default = jsonencode(["git", "make"])
  mutable = true
  order   = 5
}

data "coder_workspace_tags" "region" {
  tags = {
    "region" = data.coder_parameter.region.value
  }
}

locals {
  home = "${data.coder_parameter.base_dir.value}/${data.coder_workspace_owner.me.name}/${data.coder_workspace.me.name}"
}

resource "coder_agent" "main" {
  os   = data.coder_provisioner.me.os
  arch = data.coder_provisioner.me.arch
  dir  = local.home
  env = {
    PROJECT = data.coder_parameter.project.value
  }

  metadata {
    key          = "cpu"
    display_name = "CPU parameter"
    script       = "echo ${data.coder_parameter.cpu.value} cores"
    interval     = 1
    timeout      = 2
  }
  metadata {
    key          = "mem"
    display_name = "Memory"
    script       = "coder stat mem --host"
    interval     = 1
    timeout      = 5
  }
}

resource "coder_env" "region" {
  agent_id = coder_agent.main.id
  name     = "REGION"
  value    = data.coder_parameter.region.value
}

resource "coder_env" "owner" {
  agent_id = coder_agent.main.id
  name     = "OWNER_EMAIL"
  value    = data.coder_workspace_owner.me.email
}

resource "coder_env" "token" {
  agent_id = coder_agent.main.id
  name     = "OWNER_TOKEN"
  value    = data.coder_workspace_owner.me.session_token
}

resource "coder_script" "setup" {
  agent_id           = coder_agent.main.id
  display_name       = "Setup"
  run_on_start       = true
  start_blocks_login = true
  script             = <<-EOT
    sleep 1
    echo "tools=${join(",", jsondecode(data.coder_parameter.tools.value))} gpu=${data.coder_parameter.gpu.value} owner=${data.coder_workspace_owner.me.name}" > "${local.home}/setup.out"
  EOT
}

resource "coder_script" "greet" {
  agent_id     = coder_agent.main.id
  display_name = "Greet"
  run_on_start = true
  script       = "echo hello from greet; echo greeted > '${local.home}/greet.out'"
}

resource "coder_app" "docs" {
  agent_id     = coder_agent.main.id
  slug         = "docs"
  display_name = "Docs"
  url          = "http://localhost:8000"
  share        = "owner"
}

resource "terraform_data" "agent" {
  count = data.coder_workspace.me.start_count

  # A parameter change restarts the agent, as a changed container would.
  triggers_replace = [
    data.coder_parameter.cpu.value,
    data.coder_parameter.gpu.value,
    data.coder_parameter.tools.value,
  ]

  input = {
    pidfile = "${local.home}/.coder-agent.pid"
  }

  provisioner "local-exec" {
    command = <<-EOT
      set -e
      mkdir -p "$HOME_DIR"
      setsid -f sh -c 'echo $$ > "$0"; exec sh -c "$INIT_SCRIPT"' "$PIDFILE" >"$HOME_DIR/.coder-agent.log" 2>&1 </dev/null
      for i in $(seq 1 50); do [ -s "$PIDFILE" ] && break; sleep 0.1; done
    EOT
    environment = {
      HOME_DIR          = local.home
      PIDFILE           = "${local.home}/.coder-agent.pid"
      INIT_SCRIPT       = coder_agent.main.init_script
      CODER_AGENT_TOKEN = coder_agent.main.token
    }
  }

  provisioner "local-exec" {
    when    = destroy
    command = <<-EOT
      if [ -s "$PIDFILE" ]; then
        pid=$(cat "$PIDFILE")
        kill "$pid" 2>/dev/null || true
        for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$PIDFILE"
      fi
    EOT
    environment = {
      PIDFILE = self.input.pidfile
    }
  }
}

resource "coder_metadata" "agent" {
  count       = data.coder_workspace.me.start_count
  resource_id = terraform_data.agent[0].id
  item {
    key   = "home"
    value = local.home
  }
  item {
    key       = "secret"
    value     = "hunter2"
    sensitive = true
  }
}
`

// TestCoderTemplateUnchanged is issue 10's acceptance: a template written
// for Coder, pushed and built with the CLI, real terraform, the official
// provider and the real agent, checked the way a user would.
func TestCoderTemplateUnchanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// One provisioner per region: the workspace tags pick one per build.
	d := coderdtest.NewWithProvisioners(t, coderBinary(t),
		coderdtest.RealDaemon{Name: "prov-eu", Tags: map[string]string{"region": "eu"}},
		coderdtest.RealDaemon{Name: "prov-us", Tags: map[string]string{"region": "us"}})
	admin, _ := d.CreateFirstUser(t)
	me, err := admin.User(ctx, codersdk.Me)
	if err != nil {
		t.Fatal(err)
	}
	// ranOn names the provisioner that ran a workspace's latest build.
	ranOn := func(w codersdk.Workspace) string {
		t.Helper()
		ds, err := admin.ProvisionerDaemons(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if w.LatestBuild.Job.WorkerID != nil && d.ID == *w.LatestBuild.Job.WorkerID {
				return d.Name
			}
		}
		return fmt.Sprintf("no daemon (worker %v, job tags %v)", w.LatestBuild.Job.WorkerID, w.LatestBuild.Job.Tags)
	}

	env := signedInEnv(t, admin)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(coderTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, env, "templates", "create", "coder", "--directory", dir, "-y")

	tpl, err := admin.TemplateByName(ctx, "default", "coder")
	if err != nil {
		t.Fatal(err)
	}
	version, err := admin.TemplateVersion(ctx, tpl.ActiveVersionID)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range version.Parameters {
		names = append(names, p.Name+":"+p.Type)
	}
	if got, want := strings.Join(names, " "), "base_dir:string project:string region:string cpu:number gpu:bool tools:list(string)"; got != want {
		t.Errorf("imported parameters (by order): got %s, want %s", got, want)
	}

	base := t.TempDir()
	good := []string{"--parameter", "base_dir=" + base, "--parameter", "project=apollo", "--parameter", "cpu=4",
		"--parameter", "gpu=true", "--parameter", `tools=["git","go"]`}

	// Bad values are refused before any build, naming the parameter and rule.
	for _, c := range []struct {
		name  string
		value string
		want  []string
	}{
		{"project", "Apollo_1", []string{"project", "project must be lower-case letters, digits and dashes"}},
		{"cpu", "9", []string{"cpu", "8"}},
		{"region", "mars", []string{"region", "mars"}},
		{"gpu", "maybe", []string{"gpu", "maybe"}},
	} {
		args := append([]string{"create", "bad", "--template", "coder", "-y"}, good...)
		args = append(args, "--parameter", c.name+"="+c.value)
		_, stderr, code := run(t, env, args...)
		if code != 1 {
			t.Errorf("create with %s=%s: exit %d, want 1\n%s", c.name, c.value, code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("create with %s=%s: stderr does not say %q:\n%s", c.name, c.value, w, stderr)
			}
		}
	}
	if ws, _ := admin.Workspaces(ctx, codersdk.WorkspaceFilter{Name: "bad"}); ws.Count != 0 {
		t.Errorf("a refused create left %d workspaces named bad", ws.Count)
	}

	mustRun(t, env, append([]string{"create", "dev", "--template", "coder", "-y"}, good...)...)
	t.Cleanup(func() { _, _, _ = run(t, env, "stop", "dev", "-y") })
	w := showWorkspace(t, env, "dev")
	if got := ranOn(w); got != "prov-eu" {
		t.Errorf("build with region=eu ran on %s, want prov-eu", got)
	}
	home := filepath.Join(base, me.Username, "dev")

	// The blocking setup script has finished before the command runs.
	out := mustRun(t, env, "ssh", "dev", "--", `echo "$REGION|$PROJECT|$OWNER_EMAIL"; cat setup.out`)
	want := "eu|apollo|" + me.Email + "\ntools=git,go gpu=true owner=" + me.Username + "\n"
	if out != want {
		t.Errorf("coder ssh: got %q, want %q", out, want)
	}

	// The owner's session token, minted for this workspace, works.
	token := mustRun(t, env, "ssh", "dev", "--", `printf %s "$OWNER_TOKEN"`)
	owner := codersdk.New(d.URL)
	owner.SessionToken = token
	if u, err := owner.User(ctx, codersdk.Me); err != nil || u.ID != me.ID {
		t.Errorf("the workspace's owner session token: users/me gave %+v, %v; want %s", u, err, me.Username)
	}

	// Metadata values, the non-blocking script and resource metadata show
	// up in coder show -o json.
	var agent codersdk.WorkspaceAgent
	testwait.For(t, 60*time.Second, `the agent ready, metadata cpu "4 cores" and mem from coder stat`, func() (bool, string) {
		w = showWorkspace(t, env, "dev")
		agent = findAgent(w)
		values := metadataValues(agent)
		return agent.LifecycleState == codersdk.AgentLifecycleReady && values["cpu"] == "4 cores" && strings.Contains(values["mem"], "/"),
			fmt.Sprintf("agent lifecycle %s, metadata %v", agent.LifecycleState, values)
	})
	if out := mustRun(t, env, "ssh", "dev", "--", "cat greet.out"); out != "greeted\n" {
		t.Errorf("the greet script's file: got %q, want greeted", out)
	}
	var sawHome, sawSecret bool
	for _, r := range w.LatestBuild.Resources {
		for _, m := range r.Metadata {
			switch m.Key {
			case "home":
				sawHome = m.Value == home
			case "secret":
				sawSecret = m.Sensitive && m.Value == ""
			}
		}
	}
	if !sawHome || !sawSecret {
		t.Errorf("resource metadata: home shown %v, secret hidden %v; resources %+v", sawHome, sawSecret, w.LatestBuild.Resources)
	}
	if len(agent.Apps) != 1 || agent.Apps[0].Slug != "docs" || agent.Apps[0].URL != "http://localhost:8000" {
		t.Errorf("apps: got %+v, want docs at http://localhost:8000", agent.Apps)
	}
	if text := mustRun(t, env, "show", "dev"); !strings.Contains(text, "4 cores") || !strings.Contains(text, "apollo") || strings.Contains(text, "hunter2") {
		t.Errorf("coder show: want the metadata value and the parameter values, never the sensitive item:\n%s", text)
	}

	// Immutable stays; monotonic only grows; a mutable change applies.
	_, stderr, code := run(t, env, "update", "dev", "--parameter", "project=other", "-y")
	if code != 1 || !strings.Contains(stderr, "project") || !strings.Contains(stderr, "immutable") {
		t.Errorf("update of an immutable parameter: exit %d, want 1 naming project and immutable:\n%s", code, stderr)
	}
	_, stderr, code = run(t, env, "update", "dev", "--parameter", "cpu=3", "-y")
	if code != 1 || !strings.Contains(stderr, "cpu") {
		t.Errorf("update decreasing a monotonic parameter: exit %d, want 1 naming cpu:\n%s", code, stderr)
	}
	mustRun(t, env, "update", "dev", "--parameter", "cpu=6", "-y")
	testwait.For(t, 60*time.Second, "after update cpu=6: metadata cpu 6 cores", func() (bool, string) {
		w = showWorkspace(t, env, "dev")
		v := metadataValues(findAgent(w))["cpu"]
		return v == "6 cores", fmt.Sprintf("metadata cpu %q", v)
	})
	params := map[string]string{}
	for _, p := range w.LatestBuild.RichParameterValues {
		params[p.Name] = p.Value
	}
	if params["project"] != "apollo" || params["cpu"] != "6" || params["region"] != "eu" {
		t.Errorf("after update: parameters %v, want project apollo, cpu 6, region eu", params)
	}

	// region=us sends the build to the us provisioner.
	mustRun(t, env, append([]string{"create", "west", "--template", "coder", "-y", "--parameter", "region=us"}, good...)...)
	t.Cleanup(func() { _, _, _ = run(t, env, "stop", "west", "-y") })
	w = showWorkspace(t, env, "west")
	if got := ranOn(w); got != "prov-us" {
		t.Errorf("build with region=us ran on %s, want prov-us", got)
	}
	if out := mustRun(t, env, "ssh", "west", "--", `echo "$REGION"`); out != "us\n" {
		t.Errorf("coder ssh west: REGION %q, want us", out)
	}
}

// findAgent returns the workspace's first agent.
func findAgent(w codersdk.Workspace) codersdk.WorkspaceAgent {
	for _, r := range w.LatestBuild.Resources {
		for _, a := range r.Agents {
			return a
		}
	}
	return codersdk.WorkspaceAgent{}
}

// metadataValues maps an agent's metadata keys to their latest values.
func metadataValues(a codersdk.WorkspaceAgent) map[string]string {
	out := map[string]string{}
	for _, m := range a.Metadata {
		out[m.Description.Key] = m.Result.Value
	}
	return out
}
