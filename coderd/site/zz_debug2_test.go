package site_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/internal/testgitea"
)

func TestZZDebugGitea2(t *testing.T) {
	g := testgitea.Start(t, testgitea.Options{})
	u, _ := url.Parse(g.Issuer)
	b := newBrowser(t, u, chromedp.Flag("ignore-certificate-errors", true))
	for _, path := range []string{"/api/healthz", "/user/login"} {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Navigate(b.url(path)))
		t.Logf("navigate %s: %v", path, err)
		cancel()
		for i := 0; i < 3; i++ {
			ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
			state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState + " " + (document.getElementById("user_name") != null)`))
			cancel()
			t.Logf("%d: %s %v", i, state, err)
		}
	}
}
