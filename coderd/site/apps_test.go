package site_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestWorkspacePageAppLinks: a subdomain app links to its own host under
// the wildcard access URL, a path app to its path; without a wildcard
// access URL the subdomain app is shown unavailable with the reason.
func TestWorkspacePageAppLinks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, wildcard string
		want, absent   []string
	}{
		{name: "Wildcard", wildcard: "*.apps.test", want: []string{
			`<a href="http://web--main--dev--admin.apps.test:PORT/" target="_blank" rel="noopener">web</a>`,
			`<a href="/@admin/dev/apps/docs/" target="_blank" rel="noopener">docs</a>`,
			`data-app-base="http://*.apps.test:PORT"`,
		}, absent: []string{"app-unavailable"}},
		{name: "NoWildcard", want: []string{
			`<span class="app-unavailable" data-app-unavailable="web">web (unavailable: a subdomain app, and this deployment has no wildcard access URL`,
			`<a href="/@admin/dev/apps/docs/" target="_blank" rel="noopener">docs</a>`,
		}, absent: []string{"/apps/web/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d, admin, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{WildcardAccessURL: tc.wildcard}, "page")
			w := coderdtest.CreateWorkspaceWithAgent(t, admin, admin, daemon, "dev", codersdk.ProvisionedAgent{Token: "6f1a2b3c-0000-4000-8000-00000000abce",
				Apps: []codersdk.ProvisionedApp{{Slug: "web", URL: "http://localhost:8080", Subdomain: true}, {Slug: "docs", URL: "http://localhost:8081"}}})
			if _, err := admin.Workspace(ctx, w.ID); err != nil {
				t.Fatal(err)
			}
			status, html := getPage(t, d.URL, admin.SessionToken, "/@admin/dev")
			if status != http.StatusOK {
				t.Fatalf("GET /@admin/dev: got %d", status)
			}
			for _, want := range tc.want {
				if want = strings.ReplaceAll(want, "PORT", d.URL.Port()); !strings.Contains(html, want) {
					t.Errorf("the page lacks %s", want)
				}
			}
			for _, absent := range tc.absent {
				if strings.Contains(html, absent) {
					t.Errorf("the page has %s", absent)
				}
			}
		})
	}
}
