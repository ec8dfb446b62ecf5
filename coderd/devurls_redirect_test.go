package coderd_test

import (
	"net/http"
	"testing"

	"airgapcoder/coderd/coderdtest"
)

// TestDevURLRedirectStaysOnSite: the dev URL trailing-slash redirect keeps
// the request's path and query, through the same check as the dashboard's
// redirects (site.LocalRedirect): a target it refuses lands on "/".
func TestDevURLRedirectStaysOnSite(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct{ path, want string }{
		{"/@admin/dev/apps/web?x=1", "/@admin/dev/apps/web/?x=1"},
		{"/@admin/dev/ports/8080", "/@admin/dev/ports/8080/"},
		{"/@admin/dev/apps/%5Cevil.example", "/"},
		{"/@admin/dev/apps/web?x=%0D%0ALocation:%20//evil.example", "/"},
	} {
		res, err := client.Get(d.URL.String() + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := res.Header.Get("Location"); res.StatusCode != http.StatusTemporaryRedirect || got != tc.want {
			t.Errorf("GET %s: got %d Location %q, want 307 %q", tc.path, res.StatusCode, got, tc.want)
		}
	}
}
