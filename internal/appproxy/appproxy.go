// Package appproxy holds what coderd (coderd/devurls.go,
// coderd/subdomainapps.go) and a workspace proxy (wsproxy/apps.go) do
// alike to a request on its way to a workspace app and to the app's
// answer: the headers the app sees, the URL inside the workspace, and the
// deployment's cookies, which an app neither reads nor sets.
//
// It owns only that rewriting. It must not authorize, dial, log or answer
// requests, and links no server or database code: the workspace proxy
// reaches the deployment only through its API.
package appproxy

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"airgapcoder/codersdk"
)

// Target is where inside a workspace a request goes.
type Target struct {
	// Scheme is the app's: "http" or "https".
	Scheme string
	// Addr is the transport address the proxy's dial resolves to the
	// agent and the app (host:port).
	Addr string
	// BasePath is the app's own path; the request's path after the prefix
	// is appended to it. "" is the app's root.
	BasePath string
	// Query is the app's own query, put before the visitor's; "" is none.
	Query string
}

// Rewrite is the body of an httputil.ReverseProxy's Rewrite for a request
// to an app mounted under prefix ("" for none), rest being the request's
// escaped path after it: the headers (SetHeaders) and t's scheme, address,
// path and query.
func Rewrite(pr *httputil.ProxyRequest, t Target, prefix, rest string) {
	SetHeaders(pr, prefix)
	pr.Out.URL.Scheme = t.Scheme
	pr.Out.URL.Host = t.Addr
	joined := strings.TrimSuffix(t.BasePath, "/") + rest
	if joined == "" {
		joined = "/"
	}
	pr.Out.URL.RawPath = joined
	pr.Out.URL.Path, _ = url.PathUnescape(joined)
	in := pr.In.URL.RawQuery
	switch {
	case t.Query != "" && in != "":
		pr.Out.URL.RawQuery = t.Query + "&" + in
	case t.Query != "":
		pr.Out.URL.RawQuery = t.Query
	default:
		pr.Out.URL.RawQuery = in
	}
}

// SetHeaders sets the headers a request reaches the app with (plain
// requests and WebSocket upgrades alike), as Coder's app proxy and the
// reverse-proxy setups web IDEs document (code-server's nginx example:
// proxy_set_header Host $host) do:
//
//   - Host stays the visitor's. Apps that compare Origin with Host (Jupyter,
//     code-server's WebSocket check, CSRF middleware) refuse requests whose
//     Host was rewritten to their own address. This holds for apps with an
//     explicit url host too (docs/decisions.md).
//   - X-Forwarded-For, -Host and -Proto say what the proxy saw: the
//     client's address, the visitor's Host, http or https. What the
//     visitor sent in these (and Forwarded) is dropped by
//     httputil.ReverseProxy before Rewrite runs.
//   - X-Forwarded-Prefix is the path the app is mounted under, e.g.
//     /@alice/dev/apps/web; none when prefix is "".
//   - The deployment's session token, in its header or its cookie, and
//     the app cookie never reach the app; the visitor's other cookies do.
func SetHeaders(pr *httputil.ProxyRequest, prefix string) {
	pr.Out.Host = pr.In.Host
	pr.SetXForwarded()
	if prefix != "" {
		pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
	} else {
		pr.Out.Header.Del("X-Forwarded-Prefix")
	}
	pr.Out.Header.Del(codersdk.SessionTokenHeader)
	if cookies := pr.In.Cookies(); len(cookies) > 0 {
		pr.Out.Header.Del("Cookie")
		for _, ck := range cookies {
			if !CoderCookie(ck.Name) {
				pr.Out.AddCookie(ck)
			}
		}
	}
}

// DropCoderCookies is an httputil.ReverseProxy's ModifyResponse: an app
// must not replace the visitor's session or app cookie, so its Set-Cookie
// headers for them are dropped (and any it sends that do not parse are
// passed on as they are). It never fails.
func DropCoderCookies(resp *http.Response) error {
	cookies := resp.Header.Values("Set-Cookie")
	resp.Header.Del("Set-Cookie")
	for _, ck := range cookies {
		if c, err := http.ParseSetCookie(ck); err != nil || !CoderCookie(c.Name) {
			resp.Header.Add("Set-Cookie", ck)
		}
	}
	return nil
}

// CoderCookie reports the cookies that are the deployment's, not an app's:
// the session token's and the app cookie.
func CoderCookie(name string) bool {
	return name == codersdk.SessionTokenCookie || name == codersdk.SubdomainAppSessionTokenCookie
}
