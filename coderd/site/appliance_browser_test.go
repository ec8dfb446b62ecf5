package site_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// TestBrowserAppliance: the owner's Appliance page shows the release, the
// last upgrade, components, disk, certificates (one expiring soon, flagged)
// and the mirror's providers and images; a plain coder server's page says
// it is no appliance. The data here is a fixed overview: the real one is
// checked against a real appliance in package appliance.
func TestBrowserAppliance(t *testing.T) {
	t.Parallel()
	now := time.Now()
	overview := codersdk.Appliance{
		Bundle: "acme-coder", Release: "2026.11.2", PreviousRelease: "2026.11.1", BuiltAt: now.Add(-48 * time.Hour), BuiltBy: "v1.2.3",
		Components: []codersdk.ApplianceComponent{
			{Name: "coderd", Version: "v1.2.3", State: "ok", Detail: "https://coder.acme.internal"},
			{Name: "mirror", State: "down", Detail: "connection refused"},
			{Name: "terraform", Version: "1.11.4"},
		},
		Providers: []codersdk.ApplianceProvider{{Source: "registry.terraform.io/coder/coder", Version: "2.20.0", Platforms: []string{"linux_amd64"}}},
		Images:    []codersdk.ApplianceImage{{Reference: "registry.acme.internal/base:1", Digest: "sha256:" + strings.Repeat("ab", 32), Platforms: []string{"linux/amd64"}}},
		Templates: []string{"process", "container"},
		Certificates: []codersdk.ApplianceCertificate{
			{Role: "appliance CA", Subject: "CN=Acme Coder CA", Issuer: "CN=Acme Coder CA", NotAfter: now.Add(5 * 365 * 24 * time.Hour), SHA256: strings.Repeat("c", 64)},
			{Role: "imported CA", Subject: "CN=Acme Root", Issuer: "CN=Acme Root", NotAfter: now.Add(10 * 24 * time.Hour), ExpiresSoon: true, SHA256: strings.Repeat("d", 64)},
		},
		DiskUsed: 3 << 30, DiskFree: 40 << 30,
	}
	d := coderdtest.New(t, coderdtest.Options{Appliance: func(context.Context) (codersdk.Appliance, error) { return overview, nil }})
	d.CreateFirstUser(t)
	// How the last upgrade ended comes from the audit log, where the
	// appliance's journal lands: an upgrade that failed, then its rollback
	// (the server's own version record at start does not count).
	for i, rec := range []database.AuditLog{
		{UserAgent: "coder appliance v1.2.3", Action: "upgrade", Description: "upgrade from 2026.11.2 to 2026.11.3: failed: the new server did not become healthy", StatusCode: 500},
		{UserAgent: "coder appliance v1.2.3", Action: "rollback", Description: "rollback from 2026.11.3 to 2026.11.2 and its database", StatusCode: 200, Success: true},
		{UserAgent: "coderd", Action: "upgrade", Description: "server started version v1.2.3 (previous v1.2.4)", StatusCode: 200, Success: true},
	} {
		rec.ResourceType, rec.Time = "deployment", now.Add(time.Duration(i-3)*time.Minute)
		if _, err := d.DB.InsertAuditLog(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, d.URL)
	b.do("login page", chromedp.Navigate(b.url("/login")))
	b.signIn("admin@example.com", coderdtest.FirstUserPassword)
	b.do("appliance page", chromedp.Click(chromedp.CSS(`nav a[href="/admin/appliance"]`)), chromedp.WaitVisible(chromedp.CSS("#components")))
	for sel, want := range map[string]string{
		"#release":       "Release 2026.11.2 of bundle acme-coder",
		"#last-upgrade":  "rolled back",
		"#last-upgrade ": "upgrade from 2026.11.2 to 2026.11.3: failed",
		"#components":    "1.11.4",
		"#disk":          "3.0 GiB used by the appliance, 40 GiB free",
		"#certificates":  "expires soon",
		"#providers":     "registry.terraform.io/coder/coder",
		"#images":        "registry.acme.internal/base:1",
		"#templates":     "container",
	} {
		b.waitText("appliance page "+sel, sel, want, 5*time.Second)
	}
	if row := get(b, "mirror row", chromedp.Text(chromedp.CSS(`#components tr[data-component="mirror"]`))); !strings.Contains(row, "down") || !strings.Contains(row, "connection refused") {
		t.Errorf("the mirror's row says %q, want it down with the reason", row)
	}
	b.screenshot("admin-appliance")
	b.check()

	// A plain coder server: the page says so.
	plain := coderdtest.New(t, coderdtest.Options{})
	plain.CreateFirstUser(t)
	p := newBrowser(t, plain.URL)
	p.do("login page", chromedp.Navigate(p.url("/login")))
	p.signIn("admin@example.com", coderdtest.FirstUserPassword)
	p.do("appliance page", chromedp.Navigate(p.url("/admin/appliance")), chromedp.WaitVisible(chromedp.CSS("#not-appliance")))
	p.waitText("no appliance", "#not-appliance", "not an appliance", 5*time.Second)
	p.check()
}
