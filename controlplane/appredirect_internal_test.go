package controlplane

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"airgapcoder/coderd/appurl"
)

// TestRedirectToHTTPSAppHosts: with a wildcard access URL the plain HTTP
// listener sends an app host to itself over https (on the port app URLs
// use), and everything else to the access URL.
func TestRedirectToHTTPSAppHosts(t *testing.T) {
	target, _ := url.Parse("https://coder.example.internal:3443")
	apps, err := appurl.ParseWildcard("*.apps.example.internal")
	if err != nil {
		t.Fatal(err)
	}
	h := redirectToHTTPS(target, apps, http.NotFoundHandler())
	for _, tc := range []struct{ host, want string }{
		{"web--main--dev--alice.apps.example.internal:3000", "https://web--main--dev--alice.apps.example.internal:3443/p?q=1"},
		{"coder.example.internal:3000", "https://coder.example.internal:3443/p?q=1"},
		{"evil.example:3000", "https://coder.example.internal:3443/p?q=1"},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://"+tc.host+"/p?q=1", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusPermanentRedirect || w.Header().Get("Location") != tc.want {
			t.Errorf("Host %s: got %d %s, want 308 %s", tc.host, w.Code, w.Header().Get("Location"), tc.want)
		}
	}
}

// TestNewWildcardAccessURL: a wildcard access URL that is not a host name
// pattern is a configuration error naming the flag.
func TestNewWildcardAccessURL(t *testing.T) {
	base := Config{HTTPAddress: "127.0.0.1:0", PostgresURL: "postgres://x"}
	ok := base
	ok.WildcardAccessURL = "*.apps.example.internal"
	if _, err := New(ok); err != nil {
		t.Errorf("*.apps.example.internal: %v", err)
	}
	bad := base
	bad.WildcardAccessURL = "apps.example.internal"
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "--wildcard-access-url") {
		t.Errorf("apps.example.internal: got %v, want an error naming --wildcard-access-url", err)
	}
}
