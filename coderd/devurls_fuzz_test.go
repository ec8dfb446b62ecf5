package coderd

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzParseDevURL checks the dev URL path parser on request targets, taken
// apart the way the server does (url.ParseRequestURI, then EscapedPath).
//
// Properties: no panic; an accepted path names an owner, a workspace and a
// target, all non-empty (the agent, after a dot, is optional); the prefix and
// the rest put together are the path, so nothing is dropped or invented
// when the request is proxied; the prefix is four path elements under "/@"
// and a local path, so the redirect to prefix+"/" stays on this site; and
// the parsed parts, escaped again, parse to the same parts.
func FuzzParseDevURL(f *testing.F) {
	for _, s := range []string{
		"/@alice/dev/apps/web/x/y", "/@alice/dev.main/ports/8080/", "/@alice/dev/apps/web",
		"/@alice/dev/ports/80/a%2Fb?x=1", "/@al%20ice/d%2Fev/apps/w%2Feb/", "/@alice/dev.a.b/apps/code-server/?folder=/home",
		"/@alice/dev/apps/web//evil.example/", "/@alice/dev/apps/web/%2e%2e/%2e%2e/",
		// Broken.
		"/@alice/dev/files/x/", "/@alice/dev", "/@/dev/apps/web/", "/@alice/dev/apps/%zz/", "/@alice//apps/web/",
		"/@alice/.main/apps/web/", "/@alice/dev./apps/web/", "/%40alice/dev/apps/web/", "/@alice/dev/apps//",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		if len(target) > 8192 {
			t.Skip("input over the size cap")
		}
		u, err := url.ParseRequestURI(target)
		if err != nil || !strings.HasPrefix(u.Path, "/@") {
			return // the middleware passes such requests on
		}
		escaped := u.EscapedPath()
		d, ok := parseDevURL(escaped)
		if !ok {
			return
		}
		switch {
		case d.owner == "" || d.workspace == "" || d.target == "":
			t.Fatalf("%q: accepted %+v with an empty owner, workspace or target", escaped, d)
		case d.kind != "apps" && d.kind != "ports":
			t.Fatalf("%q: kind %q", escaped, d.kind)
		case d.prefix+d.rest != escaped:
			t.Fatalf("%q: prefix %q and rest %q do not make up the path", escaped, d.prefix, d.rest)
		case d.rest != "" && !strings.HasPrefix(d.rest, "/"):
			t.Fatalf("%q: rest %q does not start with /", escaped, d.rest)
		case !strings.HasPrefix(d.prefix, "/@") || strings.Count(d.prefix, "/") != 4:
			t.Fatalf("%q: prefix %q is not /@owner/workspace/kind/target", escaped, d.prefix)
		}
		loc, err := url.Parse(d.prefix + "/")
		if err != nil || loc.Scheme != "" || loc.Host != "" || loc.Path == "" || !strings.HasPrefix(loc.Path, "/@") {
			t.Fatalf("%q: the redirect %q does not stay on this site (%+v, %v)", escaped, d.prefix+"/", loc, err)
		}

		ws := d.workspace
		if d.agent != "" {
			ws += "." + d.agent
		}
		rebuilt := "/@" + url.PathEscape(d.owner) + "/" + url.PathEscape(ws) + "/" + d.kind + "/" + url.PathEscape(d.target) + d.rest
		again, ok := parseDevURL(rebuilt)
		if !ok {
			t.Fatalf("%q parsed as %+v; escaped again as %q it does not parse", escaped, d, rebuilt)
		}
		again.prefix, d.prefix = "", ""
		if again != d {
			t.Fatalf("%q parsed as %+v; escaped again as %q it parses as %+v", escaped, d, rebuilt, again)
		}
	})
}
