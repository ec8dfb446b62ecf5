package appproxy

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"

	"airgapcoder/codersdk"
)

// TestSetHeaders checks the headers a proxied request reaches the app
// with, for a path prefix and for none (where a visitor's
// X-Forwarded-Prefix must not pass either).
func TestSetHeaders(t *testing.T) {
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
				SetHeaders(pr, tc.prefix)
				pr.Out.URL.Scheme, pr.Out.URL.Host = "http", app.Listener.Addr().String()
			}}
			in := httptest.NewRequest(http.MethodGet, "https://coder.example.internal/x", nil)
			in.RemoteAddr = "192.0.2.7:51234"
			in.Header = http.Header{
				"Origin":                    {"https://coder.example.internal"},
				codersdk.SessionTokenHeader: {"secret-token"},
				"Cookie":                    {codersdk.SessionTokenCookie + "=secret-cookie; theme=dark; " + codersdk.SubdomainAppSessionTokenCookie + "=app-secret"},
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

// TestDropCoderCookies: an app's answer keeps its own cookies (and one
// that does not parse) but not those named as the deployment's.
func TestDropCoderCookies(t *testing.T) {
	t.Parallel()
	resp := &http.Response{Header: http.Header{"Set-Cookie": {
		codersdk.SessionTokenCookie + "=stolen; Path=/",
		"theme=dark; Path=/",
		codersdk.SubdomainAppSessionTokenCookie + "=stolen",
		"=no name",
	}}}
	if err := DropCoderCookies(resp); err != nil {
		t.Fatalf("DropCoderCookies: %v", err)
	}
	got := strings.Join(resp.Header.Values("Set-Cookie"), " | ")
	if want := "theme=dark; Path=/ | =no name"; got != want {
		t.Errorf("Set-Cookie %q, want %q", got, want)
	}
}

// TestRewriteURL checks the URL inside the workspace: the app's base
// path joined with the rest, escapes kept, and the app's query before
// the visitor's.
func TestRewriteURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, base, query, rest, inQuery string
		wantURL                          string
	}{
		{name: "root", rest: "", wantURL: "http://h.relay.invalid:80/"},
		{name: "base path and rest", base: "/lab/", rest: "/tree/a%2Fb", wantURL: "http://h.relay.invalid:80/lab/tree/a%2Fb"},
		{name: "visitor's query", rest: "/x", inQuery: "a=1", wantURL: "http://h.relay.invalid:80/x?a=1"},
		{name: "app's query", rest: "/x", query: "token=t", wantURL: "http://h.relay.invalid:80/x?token=t"},
		{name: "both queries", rest: "/x", query: "token=t", inQuery: "a=1", wantURL: "http://h.relay.invalid:80/x?token=t&a=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := httptest.NewRequest(http.MethodGet, "https://coder.example.internal/ignored", nil)
			in.URL.RawQuery = tc.inQuery
			pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
			Rewrite(pr, Target{Scheme: "http", Addr: "h.relay.invalid:80", BasePath: tc.base, Query: tc.query}, "", tc.rest)
			if got := pr.Out.URL.String(); got != tc.wantURL {
				t.Errorf("URL %q, want %q", got, tc.wantURL)
			}
		})
	}
}
