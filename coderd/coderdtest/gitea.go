package coderdtest

import (
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testgitea"
)

// GiteaOIDC is the sign-in configuration of a deployment that will listen
// on addr with TLS (Options.Address and Options.TLS) and signs users in
// through the Gitea g: an OAuth2 application registered on g for the
// deployment's callback, sign-ups allowed, "Gitea" on the button, and a
// client that trusts g's CA and nothing else (its connections closed when
// the test ends). Gitea's issuer has no trailing slash: discovery is asked
// for exactly what "iss" says.
func GiteaOIDC(t testing.TB, g *testgitea.Gitea, addr string) coderd.OIDCConfig {
	t.Helper()
	clientID, clientSecret := g.AddOAuthApp(t, "coder", "https://"+addr+codersdk.OIDCCallbackPath)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: g.CertPool()}}
	t.Cleanup(tr.CloseIdleConnections)
	return coderd.OIDCConfig{
		IssuerURL: g.Issuer, ClientID: clientID, ClientSecret: clientSecret, AllowSignups: true,
		SignInText: "Gitea",
		HTTPClient: &http.Client{Transport: tr, Timeout: 30 * time.Second},
	}
}
