package site_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"

	"github.com/chromedp/chromedp"
)

// getPage fetches a dashboard page as the holder of token (the session
// cookie a browser would send) and returns its status and body.
func getPage(t testing.TB, base *url.URL, token, path string) (int, string) {
	t.Helper()
	return sitePost(t, base, token, http.MethodGet, path, nil)
}

// sitePost sends a dashboard request with form values (a same-origin form
// post when form is non-nil); redirects are not followed.
func sitePost(t testing.TB, base *url.URL, token, method, path string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, base.String()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base.String())
	}
	req.AddCookie(&http.Cookie{Name: codersdk.SessionTokenCookie, Value: token})
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode == http.StatusSeeOther {
		return res.StatusCode, res.Header.Get("Location")
	}
	return res.StatusCode, string(b)
}

// button returns how the page renders the button with id: "absent",
// "hidden" (its form is), "disabled" or "enabled".
func button(html, id string) string {
	m := regexp.MustCompile(`<form[^>]*?( hidden)?><input type="hidden" name="transition" value="[a-z]+"><button type="submit" id="` + id + `"[^>]*?( disabled)?>`).FindStringSubmatch(html)
	switch {
	case m == nil:
		return "absent"
	case m[1] != "":
		return "hidden"
	case m[2] != "":
		return "disabled"
	}
	return "enabled"
}

// TestWorkspacePage renders the workspace page server-side through the
// phases of a workspace built by a hand-driven daemon: the buttons follow
// the state, Update appears for a newer active version and builds on it,
// a queued build can be canceled, and the resources' coder_metadata and the
// agent's metadata values are shown.
func TestWorkspacePage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, admin, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{}, "page")
	tpl := coderdtest.CreateTemplate(t, admin, daemon, "page", coderdtest.MinimalTemplate, nil)
	w, err := admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	const path = "/@admin/dev"
	buttons := func(step string, want map[string]string) string {
		t.Helper()
		status, html := getPage(t, d.URL, admin.SessionToken, path)
		if status != http.StatusOK {
			t.Fatalf("%s: GET %s: got %d, want 200:\n%s", step, path, status, html)
		}
		for id, w := range want {
			if got := button(html, id); got != w {
				t.Errorf("%s: button %s is %s, want %s", step, id, got, w)
			}
		}
		return html
	}
	buttons("build queued", map[string]string{"start": "disabled", "stop": "disabled", "cancel": "enabled", "update": "hidden"})

	agentToken := "6f1a2b3c-0000-4000-8000-00000000abcd"
	daemon.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`), Resources: []codersdk.ProvisionedResource{
		{Type: "terraform_data", Name: "box", Agents: []codersdk.ProvisionedAgent{{
			Name: "main", Token: agentToken, OperatingSystem: "linux", Architecture: "amd64",
			Metadata: []codersdk.AgentMetadataDescription{{Key: "load", DisplayName: "Load average", Script: "true", IntervalSeconds: 10, TimeoutSeconds: 1}},
			Apps: []codersdk.ProvisionedApp{
				{Slug: "web", URL: "http://localhost:8080", Healthcheck: &codersdk.AppHealthcheck{URL: "http://localhost:8080/healthz", Interval: 5, Threshold: 6}},
				{Slug: "docs", URL: "http://localhost:8081"},
			},
		}},
			Metadata: []codersdk.WorkspaceResourceMetadata{{Key: "image", Value: "ubuntu:24.04"}, {Key: "password", Value: "hunter2", Sensitive: true}}},
	}})
	agent := d.Client()
	agent.SessionToken = agentToken
	if err := agent.PostAgentMetadata(ctx, codersdk.PostAgentMetadataRequest{Metadata: []codersdk.AgentMetadataUpdate{
		{Key: "load", Result: codersdk.AgentMetadataResult{CollectedAt: time.Now(), Value: "0.42"}},
	}}); err != nil {
		t.Fatal(err)
	}
	if w, err = admin.Workspace(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	for _, app := range coderdtest.WorkspaceAgent(t, w).Apps {
		if app.Slug == "web" {
			if err := agent.PostWorkspaceAppHealth(ctx, codersdk.PostWorkspaceAppHealthsRequest{Healths: map[string]string{app.ID: codersdk.WorkspaceAppHealthUnhealthy}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	html := buttons("running", map[string]string{"start": "disabled", "stop": "enabled", "cancel": "hidden", "update": "hidden"})
	for _, want := range []string{"terraform_data.box", "<dt>image</dt><dd>ubuntu:24.04</dd>", "<dt>Load average</dt><dd data-metadata-key=\"load\">0.42</dd>",
		`<span class="status bad" data-app-health="web">unhealthy</span>`} {
		if !strings.Contains(html, want) {
			t.Errorf("running: the page lacks %q", want)
		}
	}
	if strings.Contains(html, "hunter2") {
		t.Error("running: the page shows a sensitive coder_metadata value")
	}
	if strings.Contains(html, `data-app-health="docs"`) {
		t.Error("running: the page shows a health for an app without a healthcheck")
	}

	// A newer active version: Update builds on it.
	v2 := coderdtest.UploadVersion(t, admin, tpl.ID, coderdtest.MinimalTemplate, nil)
	daemon.RunOne(t)
	if err := admin.UpdateActiveTemplateVersion(ctx, tpl.ID, codersdk.UpdateActiveTemplateVersion{ID: v2.ID}); err != nil {
		t.Fatal(err)
	}
	buttons("outdated", map[string]string{"stop": "enabled", "update": "enabled"})
	if status, loc := sitePost(t, d.URL, admin.SessionToken, http.MethodPost, path+"/build", url.Values{"transition": {"update"}}); status != http.StatusSeeOther || loc != path {
		t.Fatalf("update: got %d to %q, want 303 to %s", status, loc, path)
	}
	if w, err = admin.Workspace(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	if w.LatestBuild.TemplateVersionID != v2.ID || w.LatestBuild.Transition != codersdk.WorkspaceTransitionStart {
		t.Errorf("update: latest build is a %s on version %s, want a start on %s", w.LatestBuild.Transition, w.LatestBuild.TemplateVersionID, v2.ID)
	}
	buttons("updating", map[string]string{"start": "disabled", "stop": "disabled", "cancel": "enabled", "update": "hidden"})

	// Cancel the queued update.
	if status, loc := sitePost(t, d.URL, admin.SessionToken, http.MethodPost, path+"/build", url.Values{"transition": {"cancel"}}); status != http.StatusSeeOther || loc != path {
		t.Fatalf("cancel: got %d to %q, want 303 to %s", status, loc, path)
	}
	if w, err = admin.Workspace(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	switch w.LatestBuild.Status {
	case codersdk.WorkspaceStatusCanceled:
		buttons("canceled", map[string]string{"start": "enabled", "stop": "enabled", "cancel": "hidden"})
	case codersdk.WorkspaceStatusCanceling:
		buttons("canceling", map[string]string{"start": "disabled", "stop": "disabled", "cancel": "disabled"})
	default:
		t.Errorf("after cancel: status %s, want canceled or canceling", w.LatestBuild.Status)
	}
}

// BenchmarkWorkspaceList1000 renders /workspaces for an owner with 1,000
// workspaces (built by a hand-driven daemon, each with one resource and
// agent) and, side by side, fetches the same rows from the JSON list
// endpoint the page is built from. It reports the page's time per render
// (page-ms) and its cost over the API's (page/api).
func BenchmarkWorkspaceList1000(b *testing.B) {
	const n = 1000
	ctx := context.Background()
	d := coderdtest.New(b, coderdtest.Options{ProvisionerPSK: "psk"})
	admin, _ := d.CreateFirstUser(b)
	tpl := coderdtest.CreateTemplate(b, admin, d.NewDaemon(b, "bench-import", nil), "bench", coderdtest.MinimalTemplate, nil)

	// Creation and builds run in parallel, each worker with its own daemon.
	start := time.Now()
	const workers = 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for k := range workers {
		daemon := d.NewDaemon(b, fmt.Sprintf("bench-%d", k), nil)
		wg.Go(func() {
			for i := k; i < n; i += workers {
				if _, err := admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: fmt.Sprintf("ws-%04d", i)}); err != nil {
					errs <- err
					return
				}
				j, err := daemon.Client.AcquireJob(ctx, daemon.ID, 10*time.Second)
				if err != nil || j == nil {
					errs <- fmt.Errorf("acquire build of ws-%04d: %v", i, err)
					return
				}
				if err := daemon.Client.CompleteJob(ctx, daemon.ID, j.JobID, codersdk.CompleteJobRequest{State: []byte(`{}`),
					Resources: []codersdk.ProvisionedResource{{Type: "terraform_data", Name: "box", Agents: []codersdk.ProvisionedAgent{
						{Name: "main", Token: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), OperatingSystem: "linux", Architecture: "amd64"},
					}}}}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.Logf("created %d built workspaces in %s", n, time.Since(start).Round(time.Millisecond))

	status, html := getPage(b, d.URL, admin.SessionToken, "/workspaces")
	if status != http.StatusOK {
		b.Fatalf("GET /workspaces: got %d, want 200", status)
	}
	if rows := strings.Count(html, "<tr data-workspace-id="); rows != n {
		b.Fatalf("GET /workspaces: got %d rows, want %d", rows, n)
	}
	api := func() {
		res, err := admin.Workspaces(ctx, codersdk.WorkspaceFilter{})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Workspaces) != n {
			b.Fatalf("GET /api/v2/workspaces: got %d, want %d", len(res.Workspaces), n)
		}
	}
	var pageTime, apiTime time.Duration
	for b.Loop() {
		t0 := time.Now()
		if status, _ := getPage(b, d.URL, admin.SessionToken, "/workspaces"); status != http.StatusOK {
			b.Fatalf("GET /workspaces: got %d", status)
		}
		t1 := time.Now()
		api()
		pageTime += t1.Sub(t0)
		apiTime += time.Since(t1)
	}
	b.ReportMetric(float64(pageTime)/float64(time.Millisecond)/float64(b.N), "page-ms")
	b.ReportMetric(float64(apiTime)/float64(time.Millisecond)/float64(b.N), "api-ms")
	b.ReportMetric(float64(pageTime)/float64(apiTime), "page/api")
	b.ReportMetric(float64(len(html))/1024, "page-KiB")
}

// waitButtons waits until the workspace page's build buttons are enabled
// (true) or disabled (false) as want says, without reloading the page.
func (b *browser) waitButtons(step string, want map[string]bool, timeout time.Duration) {
	b.t.Helper()
	const read = `JSON.stringify(Object.fromEntries(["start", "stop", "cancel", "update"].map((id) => {
		const e = document.getElementById(id); return [id, !!e && !e.disabled && !e.closest("form").hidden]; })))`
	testwait.For(b.t, timeout, fmt.Sprintf("%s: buttons enabled %v", step, want), func() (bool, string) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](read))
		var state map[string]bool
		ok := err == nil && json.Unmarshal([]byte(got), &state) == nil
		for id, w := range want {
			ok = ok && state[id] == w
		}
		return ok, fmt.Sprintf("enabled %s (err %v)", got, err)
	})
}

// waitMatch waits until the element sel's text matches re.
func (b *browser) waitMatch(step, sel string, re *regexp.Regexp, timeout time.Duration) string {
	b.t.Helper()
	var got string
	testwait.For(b.t, timeout, fmt.Sprintf("%s: %s matching %s", step, sel, re), func() (bool, string) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		var err error
		got, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		return err == nil && re.MatchString(got), fmt.Sprintf("it shows %q (err %v)", got, err)
	})
	return got
}

// workspaceLiveParts checks, on the page of the running process-template
// workspace and without a reload, what the page follows live: the build
// buttons, the agent's "load" metadata value (a number from /proc/loadavg)
// and the startup script's output in the agent logs.
func workspaceLiveParts(b *browser) {
	b.t.Helper()
	b.waitButtons("running: only Stop", map[string]bool{"start": false, "stop": true, "cancel": false, "update": false}, 10*time.Second)
	b.waitMatch("metadata value appears", `#workspace [data-metadata-key="load"]`, regexp.MustCompile(`^\d+(\.\d+)?$`), 60*time.Second)
	b.waitText("startup script output appears", "#workspace [data-field=agent-logs]", "startup-says-hello", 60*time.Second)
	b.waitText("resources are listed", "#workspace [data-field=resources]", "terraform_data.agent", 10*time.Second)
}

// TestWorkspacePageSchedule: the workspace page says when the workspace
// starts and stops (issue 35), as `coder show` does.
func TestWorkspacePageSchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, admin, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{}, "schedule")
	tpl := coderdtest.CreateTemplate(t, admin, daemon, "schedule", coderdtest.MinimalTemplate, nil)
	ttl := (8 * time.Hour).Milliseconds()
	start := "CRON_TZ=Europe/Berlin 30 9 * * 1-5"
	if _, err := admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{
		TemplateID: tpl.ID, Name: "sched", TTLMillis: &ttl, AutostartSchedule: &start,
	}); err != nil {
		t.Fatal(err)
	}
	daemon.RunOne(t)
	status, page := getPage(t, d.URL, admin.SessionToken, "/@admin/sched")
	if status != http.StatusOK {
		t.Fatalf("GET the workspace page: %d", status)
	}
	for _, want := range []string{`id="schedule"`, "Starts ", "Europe/Berlin", "Stops 8h0m0s after it starts or was last used", "Stops at "} {
		if !strings.Contains(page, want) {
			t.Errorf("the workspace page lacks %q:\n%s", want, page)
		}
	}
}
