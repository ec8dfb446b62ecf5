package cli_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testwait"
)

// appHealthTemplate is a process workspace (the agent runs on this host)
// with three coder_apps: one whose healthcheck reaches a server, one whose
// healthcheck URL has no server behind it, and one without a healthcheck.
// Its two %s are the URLs of the first two healthchecks, its %q the base
// folder.
const appHealthTemplate = `terraform {
  required_providers {
    coder = {
      source = "coder/coder"
    }
  }
}

data "coder_provisioner" "me" {}
data "coder_workspace" "me" {}
data "coder_workspace_owner" "me" {}

locals {
  home = "%[3]s/${data.coder_workspace_owner.me.name}/${data.coder_workspace.me.name}"
}

resource "coder_agent" "main" {
  os   = data.coder_provisioner.me.os
  arch = data.coder_provisioner.me.arch
}

resource "coder_app" "served" {
  agent_id = coder_agent.main.id
  slug     = "served"
  url      = "%[1]s"
  healthcheck {
    url       = "%[1]s"
    interval  = 1
    threshold = 2
  }
}

resource "coder_app" "dead" {
  agent_id = coder_agent.main.id
  slug     = "dead"
  url      = "%[2]s"
  healthcheck {
    url       = "%[2]s"
    interval  = 1
    threshold = 2
  }
}

resource "coder_app" "plain" {
  agent_id = coder_agent.main.id
  slug     = "plain"
  url      = "http://localhost:9"
}

resource "terraform_data" "agent" {
  count = data.coder_workspace.me.start_count
  input = {
    pidfile = "${local.home}/.coder-agent.pid"
  }
  provisioner "local-exec" {
    command = <<-EOT
      set -e
      mkdir -p "$HOME_DIR"
      env -i PATH="$PATH" HOME="$HOME_DIR" CODER_AGENT_TOKEN="$CODER_AGENT_TOKEN" INIT_SCRIPT="$INIT_SCRIPT" \
        setsid -f sh -c 'cd "$HOME"; echo $$ > "$0"; exec sh -c "$INIT_SCRIPT"' "$PIDFILE" >"$HOME_DIR/.coder-agent.log" 2>&1 </dev/null
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
`

// TestAppHealthcheckRealAgent is issue 31's acceptance for app health:
// real terraform with the official provider, the real agent checking the
// healthchecks from the workspace, and coder show reporting what it found.
func TestAppHealthcheckRealAgent(t *testing.T) {
	t.Parallel()
	served := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprintln(w, "ok") }))
	t.Cleanup(served.Close)
	dead := "http://" + testport.Addr(t) + "/healthz"

	d := coderdtest.NewWithProvisioners(t, coderBinary(t))
	admin, _ := d.CreateFirstUser(t)
	env := baseEnv(t, "CODER_URL="+d.URL.String(), "CODER_SESSION_TOKEN="+admin.SessionToken)
	dir := t.TempDir()
	tf := fmt.Sprintf(appHealthTemplate, served.URL+"/healthz", dead, t.TempDir())
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(tf), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, env, "templates", "create", "health", "--directory", dir, "-y")
	mustRun(t, env, "create", "dev", "--template", "health", "-y")
	t.Cleanup(func() { _, _, _ = run(t, env, "stop", "dev", "-y") })

	var health map[string]string
	testwait.For(t, 60*time.Second, "coder show -o json: app served healthy, dead unhealthy", func() (bool, string) {
		w := showWorkspace(t, env, "dev")
		health = map[string]string{}
		for _, app := range findAgent(w).Apps {
			health[app.Slug] = app.Health
		}
		return health["served"] == codersdk.WorkspaceAppHealthHealthy && health["dead"] == codersdk.WorkspaceAppHealthUnhealthy, fmt.Sprintf("app health %v", health)
	})
	if health["plain"] != codersdk.WorkspaceAppHealthDisabled {
		t.Errorf("coder show -o json: app plain (no healthcheck) has health %q, want disabled", health["plain"])
	}
	text := mustRun(t, env, "show", "dev")
	for _, want := range []string{"/apps/served/ (healthy)", "/apps/dead/ (unhealthy)"} {
		if !strings.Contains(text, want) {
			t.Errorf("coder show: want %q in\n%s", want, text)
		}
	}
	if strings.Contains(text, "/apps/plain/ (") {
		t.Errorf("coder show: an app without a healthcheck shows a health:\n%s", text)
	}

	// The served app goes down: unhealthy after its threshold.
	served.Close()
	testwait.For(t, 30*time.Second, "after its server stopped: app served unhealthy", func() (bool, string) {
		app := appBySlug(findAgent(showWorkspace(t, env, "dev")), "served")
		return app.Health == codersdk.WorkspaceAppHealthUnhealthy, "health " + app.Health
	})
}

// appBySlug returns the agent's app called slug.
func appBySlug(a codersdk.WorkspaceAgent, slug string) codersdk.WorkspaceApp {
	for _, app := range a.Apps {
		if app.Slug == slug {
			return app
		}
	}
	return codersdk.WorkspaceApp{}
}
