package site_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// TestBrowserAppHealth: the workspace page shows an app's health next to
// its link, and follows its changes without a reload; an app without a
// healthcheck shows none.
func TestBrowserAppHealth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, admin, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{}, "health")
	agentToken := "6f1a2b3c-0000-4000-8000-00000000beef"
	w := coderdtest.CreateWorkspaceWithAgent(t, admin, admin, daemon, "dev", codersdk.ProvisionedAgent{Token: agentToken, Apps: []codersdk.ProvisionedApp{
		{Slug: "web", URL: "http://localhost:8080", Healthcheck: &codersdk.AppHealthcheck{URL: "http://localhost:8080/healthz", Interval: 5, Threshold: 6}},
		{Slug: "docs", URL: "http://localhost:8081"},
	}})
	var webID string
	for _, app := range coderdtest.WorkspaceAgent(t, w).Apps {
		if app.Slug == "web" {
			webID = app.ID
		}
	}
	agent := d.Client()
	agent.SessionToken = agentToken
	report := func(health string) {
		t.Helper()
		if err := agent.PostWorkspaceAppHealth(ctx, codersdk.PostWorkspaceAppHealthsRequest{Healths: map[string]string{webID: health}}); err != nil {
			t.Fatal(err)
		}
	}

	b := newBrowser(t, d.URL)
	b.do("login page", chromedp.Navigate(b.url("/login")))
	b.signIn("admin@example.com", coderdtest.FirstUserPassword)
	b.do("workspace page", chromedp.Navigate(b.url("/@admin/dev")), chromedp.WaitVisible(chromedp.CSS("#workspace")))
	const read = `(() => { const s = document.querySelector('[data-app-health="web"]');
		return (s ? s.textContent + " " + s.className : "none") + (document.querySelector('[data-app-health="docs"]') ? " docs too" : ""); })()`
	wait := func(step, want string) {
		t.Helper()
		testwait.For(t, 15*time.Second, fmt.Sprintf("%s: the web app's health shows %q", step, want), func() (bool, string) {
			got := get(b, step, chromedp.Evaluate[string](read))
			return got == want, fmt.Sprintf("it shows %q", got)
		})
	}
	wait("first render", "initializing status busy")
	report(codersdk.WorkspaceAppHealthUnhealthy)
	wait("unhealthy, without a reload", "unhealthy status bad")
	report(codersdk.WorkspaceAppHealthHealthy)
	wait("healthy again", "healthy status ok")
	b.screenshot("app-health")
	b.check()
}
