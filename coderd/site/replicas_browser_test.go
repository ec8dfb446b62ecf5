package site_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/replicasync"
)

// TestBrowserReplicas: with a second replica registered in the database,
// the owner's Replicas page lists both, each with its host, relay address
// and version; a member is refused.
func TestBrowserReplicas(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{})
	admin, _ := d.CreateFirstUser(t)
	d.CreateUser(t, admin, "bob")

	// A second replica on the same database, heartbeating until the end.
	ctx, cancel := context.WithCancel(context.Background())
	ps := coderdtest.RunPubsub(t, d.DatabaseURL)
	second, err := replicasync.New(ctx, d.DB, ps, replicasync.Options{
		Hostname: "replica-two", RelayAddress: "https://10.1.2.3:3443", Version: "v0.0.0-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = second.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-runDone })

	b := newBrowser(t, d.URL)
	b.do("login page", chromedp.Navigate(b.url("/login")))
	b.signIn("admin@example.com", coderdtest.FirstUserPassword)
	b.do("replicas page", chromedp.Click(chromedp.CSS(`nav a[href="/admin/replicas"]`)), chromedp.WaitVisible(chromedp.CSS("#replicas")))
	b.waitText("the count", "main p", "2 coderd replicas serve this deployment", 5*time.Second)
	rows := get(b, "read the table", chromedp.Text(chromedp.CSS("#replicas tbody")))
	for _, want := range []string{"coderdtest", d.URL.String(), "replica-two", "https://10.1.2.3:3443", "v0.0.0-test"} {
		if !strings.Contains(rows, want) {
			t.Errorf("replicas table %q does not show %q", rows, want)
		}
	}
	b.screenshot("admin-replicas")
	b.check()

	b.signOut()
	b.signIn("bob@example.com", coderdtest.FirstUserPassword)
	b.do("member opens the replicas page", chromedp.Navigate(b.url("/admin/replicas")), chromedp.WaitVisible(chromedp.CSS("main")))
	if body := get(b, "read the page", chromedp.Text(chromedp.CSS("main"))); !strings.Contains(body, "You are not allowed to see this page") || strings.Contains(body, "replica-two") {
		t.Errorf("a member opening /admin/replicas: %q, want a refusal in words and nothing else", body)
	}
	b.mu.Lock()
	b.errors = nil // the 403 of the refused page is the point
	b.mu.Unlock()
	b.check()
}
