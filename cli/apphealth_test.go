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

// appHealthApps is a file added beside examples/templates/process's
// main.tf: three coder_apps on its agent (which runs on this host), one whose
// healthcheck reaches a server, one whose healthcheck URL has no server
// behind it, and one without a healthcheck. Its two %s are the URLs of the
// two healthchecks.
const appHealthApps = `resource "coder_app" "served" {
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
	env := signedInEnv(t, admin)
	dir := processTemplateWith(t, map[string]string{"apps.tf": fmt.Sprintf(appHealthApps, served.URL+"/healthz", dead)})
	mustRun(t, env, "templates", "create", "health", "--directory", dir, "-y", "--variable", "base_dir="+t.TempDir())
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

// processTemplateWith returns a new folder holding
// examples/templates/process/main.tf and the given files beside it
// (terraform reads them all as one module).
func processTemplateWith(t *testing.T, files map[string]string) string {
	t.Helper()
	main, err := os.ReadFile("../examples/templates/process/main.tf")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), main, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
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
