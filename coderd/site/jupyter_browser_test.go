package site_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
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
	d := coderdtest.NewWithProvisioners(t, coderBinary(t))
	admin, _ := d.CreateFirstUser(t)
	j := newJupyterWorkspace(t, admin, false)

	b := newBrowser(t, d.URL)
	b.mu.Lock()
	b.ignore = func(u string) bool { return strings.Contains(u, "/apps/jupyter/") }
	b.mu.Unlock()
	app := b.url("/@admin/dev/apps/jupyter/")
	j.openFromWorkspacePage(b, app)
	j.runCheckNotebook(b, app)
	b.check()
}

// TestBrowserJupyterSubdomainApp is the same through a subdomain app (issue
// 31's second acceptance test with the real application): Jupyter at the
// root of its own origin (coder_app subdomain = true, base_url "/", Coder's
// jupyter-notebook module's setup) over HTTPS on the wildcard certificate
// from the appliance CA, which Chromium trusts through its NSS database.
// The owner opens it from the workspace page through the app host's
// sign-in redirects; Jupyter's default origin and XSRF checks then see the
// app host as both Origin and Host, the kernel's WebSocket goes to the app
// host, and the browser holds no coderd session cookie for the app's
// origin.
func TestBrowserJupyterSubdomainApp(t *testing.T) {
	t.Parallel()
	cert, browserOpts := wildcardTLS(t)
	d := coderdtest.NewWithProvisionersOptions(t, coderBinary(t), coderdtest.Options{TLS: true, TLSCertificate: &cert, WildcardAccessURL: appsWildcard})
	admin, _ := d.CreateFirstUser(t)
	j := newJupyterWorkspace(t, admin, true)

	b := newBrowser(t, d.URL, browserOpts...)
	b.mu.Lock()
	b.ignore = func(u string) bool { return strings.Contains(u, ".apps.test") }
	b.mu.Unlock()
	origin := appOrigin(d, "jupyter")
	j.openFromWorkspacePage(b, origin+"/")
	if loc := b.location(); !strings.HasPrefix(loc, origin+"/") || strings.Contains(loc, codersdk.SubdomainAppSessionTokenParam) {
		t.Errorf("Jupyter's file list is at %s, want it on %s without the sign-in token", loc, origin)
	}
	j.runCheckNotebook(b, origin+"/")

	cookies, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{origin + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cookies.Cookies {
		names = append(names, c.Name)
		if c.Name == codersdk.SessionTokenCookie {
			t.Errorf("Chromium would send the %s cookie to %s (domain %q)", c.Name, origin, c.Domain)
		}
	}
	t.Logf("cookies Chromium sends to %s: %v", origin, names)
	u, _ := url.Parse(origin)
	b.check(u.Host)
}

// jupyterWorkspace is admin's workspace "dev" from the process template
// with testdata/jupyter.tf: its start runs Jupyter Notebook, the coder_app
// "jupyter".
type jupyterWorkspace struct {
	t       *testing.T
	home    string // the workspace's folder, Jupyter's notebook dir: check.ipynb, jupyter.log, the pid files
	port    int    // where Jupyter listens, on loopback
	baseURL string // Jupyter's base_url: the app's path, or "/" for a subdomain app
}

// newJupyterWorkspace pushes the template (Jupyter as a subdomain app or
// under the app's path) and creates the workspace. When the test ends,
// neither the agent nor Jupyter (and its kernel) outlive it.
func newJupyterWorkspace(t *testing.T, admin *codersdk.Client, subdomain bool) *jupyterWorkspace {
	t.Helper()
	if _, err := os.Stat(jupyterPath); err != nil {
		t.Fatalf("this test needs Debian's jupyter-notebook at %s (scripts/install-deps.sh installs it): %v", jupyterPath, err)
	}
	ctx := context.Background()
	base := t.TempDir()
	j := &jupyterWorkspace{t: t, home: filepath.Join(base, "admin", "dev"), port: freePort(t), baseURL: "/@admin/dev/apps/jupyter/"}
	if subdomain {
		j.baseURL = "/"
	}
	files := coderdtest.TemplateFiles(t, "../../examples/templates/process")
	jupyterTF, err := os.ReadFile("testdata/jupyter.tf")
	if err != nil {
		t.Fatal(err)
	}
	files["jupyter.tf"] = string(jupyterTF)
	tpl := pushTemplate(t, admin, "jupyter", files, []codersdk.VariableValue{
		{Name: "base_dir", Value: base}, {Name: "jupyter_port", Value: strconv.Itoa(j.port)},
		{Name: "jupyter_subdomain", Value: strconv.FormatBool(subdomain)},
	})
	if err := os.MkdirAll(j.home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(j.home, "check.ipynb"), []byte(checkNotebook), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The stop build's destroy ends the agent; whatever a failed test
		// left running is stopped by its pid.
		ctx := context.Background()
		if _, err := admin.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err == nil {
			testwait.Until(time.Minute, func() bool {
				w, err := admin.Workspace(ctx, w.ID)
				return err != nil || (w.LatestBuild.Status != codersdk.WorkspaceStatusPending && w.LatestBuild.Status != codersdk.WorkspaceStatusStopping)
			})
		}
		stopPIDFile(filepath.Join(j.home, "jupyter.pid"))
		stopPIDFile(filepath.Join(j.home, ".coder-agent.pid"))
	})
	return j
}

// openFromWorkspacePage signs the admin in, waits on the workspace page for
// the agent, checks that the page links Jupyter at app (an absolute URL)
// and opens it there: Jupyter's file list.
func (j *jupyterWorkspace) openFromWorkspacePage(b *browser, app string) {
	j.t.Helper()
	b.do("login page", chromedp.Navigate(b.url("/login")))
	b.signIn("admin@example.com", coderdtest.FirstUserPassword)
	b.do("workspace page", chromedp.Navigate(b.url("/@admin/dev")), chromedp.WaitVisible(chromedp.CSS("#workspace")))
	b.waitText("workspace reaches running", "#workspace [data-field=status]", "running", 3*time.Minute)
	b.waitText("agent becomes ready", "#workspace [data-field=agents]", "lifecycle ready", 2*time.Minute)
	href := get(b, "read the app's link", chromedp.Evaluate[string](`(() => {
		const a = [...document.querySelectorAll('#workspace a')].find((a) => a.textContent === 'Jupyter Notebook');
		return a ? a.href : ""; })()`))
	if href != app {
		j.t.Fatalf("the workspace page links Jupyter at %q, want %s", href, app)
	}
	j.wait()
	// Jupyter's / redirects to its file list, tree.
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	err := chromedp.Do(ctx, chromedp.Navigate(href), chromedp.WaitVisible(chromedp.CSS("#notebook_list")))
	cancel()
	if err != nil {
		b.screenshot("jupyter-no-tree")
		j.t.Fatalf("open Jupyter from the workspace page: %v (page %s); Jupyter says:\n%s", err, b.location(), jupyterRefusals(filepath.Join(j.home, "jupyter.log")))
	}
	b.waitText("Jupyter lists the notebook", "#notebook_list", "check.ipynb", 30*time.Second)
	b.screenshot("jupyter-tree")
}

// runCheckNotebook opens check.ipynb from Jupyter at app, runs its cell
// and reads 42 from the page: starting the kernel is a POST that Jupyter
// checks (Origin against Host, XSRF cookie), then the kernel's channels are
// a WebSocket it checks the same way, which must have gone to app's host.
func (j *jupyterWorkspace) runCheckNotebook(b *browser, app string) {
	t := j.t
	t.Helper()
	b.do("open the notebook", chromedp.Navigate(app+"notebooks/check.ipynb"), chromedp.WaitVisible(chromedp.CSS("#notebook-container .cell")))
	const connected = `(() => { const n = window.Jupyter && window.Jupyter.notebook;
		return !!(n && n.kernel && n.kernel.is_connected() && n.kernel_busy === false); })()`
	if !testwait.Until(60*time.Second, func() bool { return get(b, "kernel state", chromedp.Evaluate[bool](connected)) }) {
		b.screenshot("jupyter-no-kernel")
		t.Fatalf("the notebook's kernel did not connect within 60s; Jupyter says:\n%s", jupyterRefusals(filepath.Join(j.home, "jupyter.log")))
	}
	b.do("run the cell",
		chromedp.Click(chromedp.CSS("#notebook-container .cell .input_area")),
		chromedp.Click(chromedp.CSS(`#maintoolbar button[data-jupyter-action="jupyter-notebook:run-cell-and-select-next"]`)))
	b.waitText("the cell's output", "#notebook-container .output_subarea", "42", 30*time.Second)
	if out := strings.TrimSpace(get(b, "read the output", chromedp.Text(chromedp.CSS("#notebook-container .output_subarea")))); out != "42" {
		t.Errorf("the cell printed %q, want 42", out)
	}
	b.screenshot("jupyter-notebook")

	// The round trip went over the kernel's WebSocket, through the app's URL.
	channels := "ws" + strings.TrimPrefix(app, "http") + "api/kernels/"
	var sawChannels bool
	b.mu.Lock()
	for _, u := range b.requests {
		if strings.HasPrefix(u, channels) && strings.Contains(u, "/channels") {
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
		t.Errorf("the page opened no kernel channels WebSocket under %s", channels)
	}
}

// wait waits until Jupyter answers on its port (its coder_script starts
// it once the agent runs).
func (j *jupyterWorkspace) wait() {
	j.t.Helper()
	status := "http://127.0.0.1:" + strconv.Itoa(j.port) + j.baseURL + "api/status"
	c := &http.Client{Timeout: 5 * time.Second}
	testwait.For(j.t, 60*time.Second, "Jupyter answering at "+status, func() (bool, string) {
		resp, err := c.Get(status)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, ""
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		log, _ := os.ReadFile(filepath.Join(j.home, "jupyter.log"))
		return false, fmt.Sprintf("%v\njupyter.log:\n%s", err, log)
	})
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
	if testwait.Until(5*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
