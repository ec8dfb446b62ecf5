package site_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testgitea"
	"airgapcoder/internal/testport"
)

func TestZZDebugGitea(t *testing.T) {
	g := testgitea.Start(t, testgitea.Options{})
	addr := testport.Addr(t)
	clientID, clientSecret := g.AddOAuthApp(t, "coder", "https://"+addr+codersdk.OIDCCallbackPath)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: g.CertPool()}}
	t.Cleanup(tr.CloseIdleConnections)
	d := coderdtest.New(t, coderdtest.Options{Address: addr, TLS: true, OIDC: coderd.OIDCConfig{
		IssuerURL: g.Issuer, ClientID: clientID, ClientSecret: clientSecret, AllowSignups: true,
		SignInText: "Gitea", HTTPClient: &http.Client{Transport: tr, Timeout: 30 * time.Second},
	}})
	d.CreateFirstUser(t)
	g.AddUser(t, testgitea.User{Username: "alice", Email: "alice@corp.example", Password: "alice-password"})
	b := newBrowser(t, d.URL, chromedp.Flag("ignore-certificate-errors", true))
	step := func(name string, a ...chromedp.Action[chromedp.Void]) {
		ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
		defer cancel()
		err := chromedp.Do(ctx, a...)
		b.mu.Lock()
		t.Logf("%s: %v\nrequests: %v\nerrors: %v", name, err, b.requests, b.errors)
		b.requests = nil
		b.mu.Unlock()
		if err != nil {
			t.Log(g.Output()[max(0, len(g.Output())-4000):])
			t.FailNow()
		}
	}
	step("login", chromedp.Navigate(b.url("/login")), chromedp.WaitVisible(chromedp.CSS("#oidc-sign-in")))
	step("click", chromedp.Click(chromedp.CSS("#oidc-sign-in")))
	for i := 0; i < 10; i++ {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		loc, err := chromedp.Run(ctx, chromedp.Location())
		state, err2 := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState + " " + (document.getElementById("user_name") != null) + " " + document.body.innerText.slice(0, 200)`))
		cancel()
		t.Logf("%d: %s %v | %s %v", i, loc, err, state, err2)
		time.Sleep(time.Second)
	}
	step("wait", chromedp.WaitVisible(chromedp.CSS("#user_name")))
	step("keys", chromedp.SendKeys(chromedp.CSS("#user_name"), "alice"), chromedp.SendKeys(chromedp.CSS("#password"), "alice-password"))
	step("submit", chromedp.Click(chromedp.CSS(testgitea.SignInButton)))
	step("grant", chromedp.WaitVisible(chromedp.CSS("#authorize-app")))
}
