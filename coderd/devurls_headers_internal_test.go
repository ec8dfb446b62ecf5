package coderd

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"

	"airgapcoder/codersdk"
)

// TestSetDevURLHeaders checks the headers a proxied request reaches the app
// with, for a path prefix and for none (where a visitor's
// X-Forwarded-Prefix must not pass either).
func TestSetDevURLHeaders(t *testing.T) {
	t.Parallel()
	seen := make(chan *http.Request, 1)
	app := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { seen <- r.Clone(r.Context()) }))
	defer app.Close()
	for _, tc := range []struct{ name, prefix, wantPrefix string }{
		{"path prefix", "/@alice/dev/apps/web", "/@alice/dev/apps/web"},
		{"no prefix", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
				setDevURLHeaders(pr, tc.prefix)
				pr.Out.URL.Scheme, pr.Out.URL.Host = "http", app.Listener.Addr().String()
			}}
			in := httptest.NewRequest(http.MethodGet, "https://coder.example.internal/x", nil)
			in.RemoteAddr = "192.0.2.7:51234"
			in.Header = http.Header{
				"Origin":                    {"https://coder.example.internal"},
				codersdk.SessionTokenHeader: {"secret-token"},
				"Cookie":                    {codersdk.SessionTokenCookie + "=secret-cookie; theme=dark"},
				"X-Forwarded-For":           {"203.0.113.9"},
				"X-Forwarded-Host":          {"evil.example"},
				"X-Forwarded-Proto":         {"gopher"},
				"X-Forwarded-Prefix":        {"/elsewhere"},
			}
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, in)
			if rec.Code != http.StatusOK {
				t.Fatalf("proxy answered %d, want 200 from the app", rec.Code)
			}
			got := <-seen
			for _, h := range []struct{ name, got, want string }{
				{"Host", got.Host, "coder.example.internal"},
				{"Origin", got.Header.Get("Origin"), "https://coder.example.internal"},
				{"X-Forwarded-For", strings.Join(got.Header.Values("X-Forwarded-For"), ", "), "192.0.2.7"},
				{"X-Forwarded-Host", got.Header.Get("X-Forwarded-Host"), "coder.example.internal"},
				{"X-Forwarded-Proto", got.Header.Get("X-Forwarded-Proto"), "https"},
				{"X-Forwarded-Prefix", strings.Join(got.Header.Values("X-Forwarded-Prefix"), ", "), tc.wantPrefix},
				{codersdk.SessionTokenHeader, got.Header.Get(codersdk.SessionTokenHeader), ""},
				{"Cookie", got.Header.Get("Cookie"), "theme=dark"},
			} {
				if h.got != h.want {
					t.Errorf("the app got %s %q, want %q", h.name, h.got, h.want)
				}
			}
		})
	}
}
