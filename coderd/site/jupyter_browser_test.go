package site_test

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/codersdk"
)

// jupyterPath is Debian's Jupyter Notebook (scripts/install-deps.sh
// installs jupyter-notebook and python3-ipykernel).
const jupyterPath = "/usr/bin/jupyter-notebook"

// checkNotebook is a notebook with one cell that prints 42.
const checkNotebook = `{"cells": [{"cell_type": "code", "execution_count": null, "id": "c1", "metadata": {}, "outputs": [],
 "source": ["print(6*7)"]}], "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
 "nbformat": 4, "nbformat_minor": 5}`

// TestBrowserJupyterPathApp is issue 31's first acceptance test: a real web
// application that checks Origin against Host and talks over a WebSocket
// (Jupyter Notebook from Debian, with its default origin and XSRF checks),
// served as a path-based coder_app of a real workspace, opened in
// Chromium from the workspace page. Running a cell and reading its output
// from the page is a round trip over the kernel's WebSocket, which Jupyter
// accepts only when the Origin's host is the request's Host.
func TestBrowserJupyterPathApp(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(jupyterPath); err != nil {
		t.Fatalf("this test needs Debian's jupyter-notebook at %s (scripts/install-deps.sh installs it): %v", jupyterPath, err)
	}
	ctx := context.Background()
	d := coderdtest.NewWithProvisioners(t, coderBinary(t))
	admin, _ := d.CreateFirstUser(t)

	// The process template with Jupyter as a path-based app.
	base := t.TempDir()
	port := freePort(t)
	files := coderdtest.TemplateFiles(t, "../../examples/templates/process")
	jupyterTF, err := os.ReadFile("testdata/jupyter.tf")
	if err != nil {
		t.Fatal(err)
	}
	files["jupyter.tf"] = string(jupyterTF)
	tpl := pushTemplate(t, admin, "jupyter", files, []codersdk.VariableValue{
		{Name: "base_dir", Value: base}, {Name: "jupyter_port", Value: strconv.Itoa(port)},
	})
	home := filepath.Join(base, "admin", "dev")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "check.ipynb"), []byte(checkNotebook), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Neither the agent nor Jupyter (and its kernel) may outlive the
		// test: the stop build's destroy ends the agent; whatever a failed
		// test left running is stopped by its pid.
		ctx := context.Background()
		if _, err := admin.CreateWorkspaceBuild(ctx, "dev", codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err == nil {
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
				w, err := admin.Workspace(ctx, w.ID)
				if err != nil || (w.LatestBuild.Status != codersdk.WorkspaceStatusPending && w.LatestBuild.Status != codersdk.WorkspaceStatusStopping) {
					break
				}
			}
		}
		stopPIDFile(filepath.Join(home, "jupyter.pid"))
		stopPIDFile(filepath.Join(home, ".coder-agent.pid"))
	})

	b := newBrowser(t, d.URL)
	b.do("login page", chromedp.Navigate(b.url("/login")))
	b.signIn("admin@example.com", coderdtest.FirstUserPassword)
	b.do("workspace page", chromedp.Navigate(b.url("/@admin/dev")), chromedp.WaitVisible(chromedp.CSS("#workspace")))
	b.waitText("workspace reaches running", "#workspace [data-field=status]", "running", 3*time.Minute)
	b.waitText("agent becomes ready", "#workspace [data-field=agents]", "lifecycle ready", 2*time.Minute)
	const appLink = `#workspace a[href$="/apps/jupyter/"]`
	href := get(b, "read the app's link", chromedp.AttributeValue(chromedp.CSS(appLink), "href")).Value
	if href != "/@admin/dev/apps/jupyter/" {
		t.Fatalf("the workspace page links Jupyter at %q, want the path-based /@admin/dev/apps/jupyter/", href)
	}
	waitJupyter(t, d, admin.SessionToken, href, filepath.Join(home, "jupyter.log"))

	// Jupyter's file list (its / redirects to tree under base_url).
	b.mu.Lock()
	b.ignore = func(u string) bool { return strings.Contains(u, "/apps/jupyter/") }
	b.mu.Unlock()
	b.do("open Jupyter from the workspace page", chromedp.Navigate(b.url(href)), chromedp.WaitVisible(chromedp.CSS("#notebook_list")))
	b.waitText("Jupyter lists the notebook", "#notebook_list", "check.ipynb", 30*time.Second)
	b.screenshot("jupyter-tree")

	// The notebook: starting its kernel is a POST that Jupyter checks
	// (Origin against Host, XSRF cookie), then the kernel's channels are a
	// WebSocket it checks the same way.
	b.do("open the notebook", chromedp.Navigate(b.url(href+"notebooks/check.ipynb")), chromedp.WaitVisible(chromedp.CSS("#notebook-container .cell")))
	const connected = `(() => { const n = window.Jupyter && window.Jupyter.notebook;
		return !!(n && n.kernel && n.kernel.is_connected() && n.kernel_busy === false); })()`
	deadline := time.Now().Add(60 * time.Second)
	for !get(b, "kernel state", chromedp.Evaluate[bool](connected)) {
		if time.Now().After(deadline) {
			b.screenshot("jupyter-no-kernel")
			t.Fatalf("the notebook's kernel did not connect within 60s; Jupyter says:\n%s", jupyterRefusals(filepath.Join(home, "jupyter.log")))
		}
		time.Sleep(250 * time.Millisecond)
	}
	b.do("run the cell",
		chromedp.Click(chromedp.CSS("#notebook-container .cell .input_area")),
		chromedp.Click(chromedp.CSS(`#maintoolbar button[data-jupyter-action="jupyter-notebook:run-cell-and-select-next"]`)))
	b.waitText("the cell's output", "#notebook-container .output_subarea", "42", 30*time.Second)
	if out := strings.TrimSpace(get(b, "read the output", chromedp.Text(chromedp.CSS("#notebook-container .output_subarea")))); out != "42" {
		t.Errorf("the cell printed %q, want 42", out)
	}
	b.screenshot("jupyter-notebook")

	// The round trip went over the kernel's WebSocket, through the dev URL.
	var sawChannels bool
	b.mu.Lock()
	for _, u := range b.requests {
		if strings.HasPrefix(u, "ws://"+d.URL.Host+href+"api/kernels/") && strings.Contains(u, "/channels") {
			sawChannels = true
		}
	}
	// Errors Jupyter's pages may log of their own (an optional extension
	// Debian does not ship, say) are shown, not failed on; what b.check
	// must still find is that nothing came from another host.
	for _, e := range b.errors {
		t.Logf("Jupyter page console: %s", e)
	}
	b.errors = nil
	b.mu.Unlock()
	if !sawChannels {
		t.Errorf("the page opened no kernel channels WebSocket under ws://%s%s", d.URL.Host, href)
	}
	b.check()
}

// waitJupyter waits until Jupyter answers through the dev URL at href.
func waitJupyter(t *testing.T, d *coderdtest.Deployment, token, href, logFile string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		status, body := coderdtest.Do(t, http.MethodGet, d.URL.String()+href+"api/status", token, nil, "")
		if status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile)
			t.Fatalf("Jupyter did not answer through %s within 60s: %s\njupyter.log:\n%s", href, coderdtest.String(status, body), log)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// jupyterRefusals returns the lines of Jupyter's log that say it refused a
// request (or the whole log when none does).
func jupyterRefusals(logFile string) string {
	f, err := os.Open(logFile)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var all, refused []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		all = append(all, s.Text())
		if strings.Contains(s.Text(), "Blocking") || strings.Contains(s.Text(), " 403 ") || strings.Contains(s.Text(), " 404 ") {
			refused = append(refused, s.Text())
		}
	}
	if len(refused) == 0 {
		return strings.Join(all, "\n")
	}
	return strings.Join(refused, "\n")
}

// stopPIDFile stops the process whose pid the file holds, if any.
func stopPIDFile(file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for range 50 {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
