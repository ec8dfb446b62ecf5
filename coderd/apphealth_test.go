package coderd_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// appsBySlug returns the apps of the workspace's first agent, by slug.
func appsBySlug(t *testing.T, c *codersdk.Client, workspaceID string) map[string]codersdk.WorkspaceApp {
	t.Helper()
	w, err := c.Workspace(context.Background(), workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]codersdk.WorkspaceApp{}
	for _, app := range coderdtest.WorkspaceAgent(t, w).Apps {
		out[app.Slug] = app
	}
	return out
}

// TestAgentAppHealth: an agent reports the health of its own apps with a
// healthcheck, and users read it with the workspace; anything else it
// names refuses the whole report.
func TestAgentAppHealth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hc := &codersdk.AppHealthcheck{URL: "http://localhost:8080/healthz", Interval: 5, Threshold: 6}
	h := newAgentHarness(t, codersdk.ProvisionedAgent{Apps: []codersdk.ProvisionedApp{
		{Slug: "web", URL: "http://localhost:8080", Healthcheck: hc},
		{Slug: "plain", URL: "http://localhost:9090"},
		// The provider does not check the values; zero is no healthcheck.
		{Slug: "zero", URL: "http://localhost:9091", Healthcheck: &codersdk.AppHealthcheck{URL: "http://localhost:9091"}},
	}})
	// Another user's workspace, with an agent and an app of its own.
	otherToken := uuid.NewString()
	other := coderdtest.CreateWorkspaceWithAgent(t, h.admin, h.member, h.daemon, "other", codersdk.ProvisionedAgent{
		Token: otherToken, Apps: []codersdk.ProvisionedApp{{Slug: "web", URL: "http://localhost:8080", Healthcheck: hc}},
	})
	otherApp := coderdtest.WorkspaceAgent(t, other).Apps[0]

	apps := appsBySlug(t, h.alice, h.workspace.ID)
	for slug, want := range map[string]string{
		"web": codersdk.WorkspaceAppHealthInitializing, "plain": codersdk.WorkspaceAppHealthDisabled, "zero": codersdk.WorkspaceAppHealthDisabled,
	} {
		if got := apps[slug].Health; got != want {
			t.Errorf("app %s after the build: health %q, want %q", slug, got, want)
		}
	}
	m, err := h.agent.AgentManifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, app := range m.Apps {
		if app.Slug == "web" && (app.Healthcheck == nil || *app.Healthcheck != *hc || app.Health != codersdk.WorkspaceAppHealthInitializing) {
			t.Errorf("manifest app web: healthcheck %+v, health %q; want %+v, initializing", app.Healthcheck, app.Health, *hc)
		}
	}

	web := apps["web"].ID
	post := func(healths map[string]string) error {
		return h.agent.PostWorkspaceAppHealth(ctx, codersdk.PostWorkspaceAppHealthsRequest{Healths: healths})
	}
	if err := post(map[string]string{web: codersdk.WorkspaceAppHealthUnhealthy}); err != nil {
		t.Fatalf("report web unhealthy: %v", err)
	}
	if got := appsBySlug(t, h.alice, h.workspace.ID)["web"].Health; got != codersdk.WorkspaceAppHealthUnhealthy {
		t.Errorf("web after the report: health %q, want unhealthy", got)
	}
	a, err := h.alice.WorkspaceAgent(ctx, h.agentID)
	if err != nil {
		t.Fatal(err)
	}
	for _, app := range a.Apps {
		if app.Slug == "web" && app.Health != codersdk.WorkspaceAppHealthUnhealthy {
			t.Errorf("web in GET workspaceagents/{id}: health %q, want unhealthy", app.Health)
		}
	}

	for _, tc := range []struct {
		name    string
		healths map[string]string
		status  int
	}{
		{"nothing", map[string]string{}, http.StatusBadRequest},
		{"another agent's app", map[string]string{otherApp.ID: codersdk.WorkspaceAppHealthHealthy}, http.StatusNotFound},
		{"an unknown app", map[string]string{uuid.NewString(): codersdk.WorkspaceAppHealthHealthy}, http.StatusNotFound},
		{"not an id", map[string]string{"web": codersdk.WorkspaceAppHealthHealthy}, http.StatusNotFound},
		{"an app without a healthcheck", map[string]string{apps["plain"].ID: codersdk.WorkspaceAppHealthHealthy}, http.StatusBadRequest},
		{"a healthcheck of zeros", map[string]string{apps["zero"].ID: codersdk.WorkspaceAppHealthHealthy}, http.StatusBadRequest},
		{"an unknown value", map[string]string{web: "sleepy"}, http.StatusBadRequest},
		{"disabled", map[string]string{web: codersdk.WorkspaceAppHealthDisabled}, http.StatusBadRequest},
		{"a good and an unknown app", map[string]string{web: codersdk.WorkspaceAppHealthHealthy, uuid.NewString(): codersdk.WorkspaceAppHealthHealthy}, http.StatusNotFound},
	} {
		if err := post(tc.healths); !codersdk.IsStatus(err, tc.status) {
			t.Errorf("%s: got %v, want %d", tc.name, err, tc.status)
		}
	}
	// Nothing refused was stored.
	if got := appsBySlug(t, h.alice, h.workspace.ID)["web"].Health; got != codersdk.WorkspaceAppHealthUnhealthy {
		t.Errorf("web after refused reports: health %q, want unhealthy", got)
	}
	if got := appsBySlug(t, h.member, other.ID)["web"].Health; got != codersdk.WorkspaceAppHealthInitializing {
		t.Errorf("the other workspace's app after refused reports: health %q, want initializing", got)
	}

	// The other workspace's agent reports its own app.
	otherAgent := h.d.Client()
	otherAgent.SessionToken = otherToken
	if err := otherAgent.PostWorkspaceAppHealth(ctx, codersdk.PostWorkspaceAppHealthsRequest{Healths: map[string]string{otherApp.ID: codersdk.WorkspaceAppHealthHealthy}}); err != nil {
		t.Fatalf("the other agent reports its own app: %v", err)
	}
	if got := appsBySlug(t, h.member, other.ID)["web"].Health; got != codersdk.WorkspaceAppHealthHealthy {
		t.Errorf("the other workspace's app after its agent's report: health %q, want healthy", got)
	}
	if got := appsBySlug(t, h.alice, h.workspace.ID)["web"].Health; got != codersdk.WorkspaceAppHealthUnhealthy {
		t.Errorf("web after the other agent's report: health %q, want unhealthy", got)
	}
}
