package testidp_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's Chromium, which scripts/install-deps.sh installs.
const chromiumPath = "/usr/bin/chromium"

// TestBrowserLoginForm: headless Chromium fills the login page and lands on
// the redirect URI with a code, so the page, Hydra's cookies (Secure, on
// another port of the same host) and the redirects work in a real browser.
func TestBrowserLoginForm(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("Chromium at %s (scripts/install-deps.sh installs it): %v", chromiumPath, err)
	}
	f := newFlow(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		// The test CA is not in Chromium's store; what is tested here is
		// the page and the redirects, not trust.
		chromedp.Flag("ignore-certificate-errors", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	ctx, stop := context.WithTimeout(ctx, 60*time.Second)
	defer stop()

	if err := chromedp.Do(ctx,
		chromedp.Navigate(f.AuthURL()),
		chromedp.WaitVisible(chromedp.CSS("#username")),
		chromedp.SendKeys(chromedp.CSS("#username"), "nobody"),
		chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("#error")),
	); err != nil {
		t.Fatalf("unknown user: %v", err)
	}
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#error")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, `Unknown user "nobody"`) {
		t.Errorf("error = %q, want it to name the unknown user", msg)
	}
	if err := chromedp.Do(ctx,
		chromedp.Clear(chromedp.CSS("#username")),
		chromedp.SendKeys(chromedp.CSS("#username"), alice.Username),
		chromedp.Click(chromedp.CSS("#sign-in")),
	); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	// The click starts a chain of navigations (login app, Hydra, consent,
	// Hydra, redirect URI); a query during one fails, so ask again until
	// the browser is at the redirect URI.
	var location string
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !strings.HasPrefix(location, f.Callback.URL+"?") {
		select {
		case <-ctx.Done():
			t.Fatalf("browser at %s, want the redirect URI\n%s", location, f.idp.Output())
		case <-tick.C:
		}
		if loc, err := chromedp.Run(ctx, chromedp.Location()); err == nil {
			location = loc
		}
	}
	f.Code(t)
	if got := f.idp.Logins(); got != 1 {
		t.Errorf("Logins() = %d, want 1", got)
	}
}
