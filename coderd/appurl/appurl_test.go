package appurl

import (
	"net/url"
	"strings"
	"testing"
)

func TestParseWildcard(t *testing.T) {
	access, _ := url.Parse("https://coder.example.internal:3443")
	for _, tc := range []struct {
		in, pattern, cert, err string
	}{
		{in: "*.apps.example.internal", pattern: "*.apps.example.internal:3443", cert: "*.apps.example.internal"},
		{in: "*.Apps.Example.Internal", pattern: "*.apps.example.internal:3443", cert: "*.apps.example.internal"},
		{in: "*-apps.example.internal", pattern: "*-apps.example.internal:3443", cert: "*.example.internal"},
		{in: "*.apps.example.internal:8443", pattern: "*.apps.example.internal:8443", cert: "*.apps.example.internal"},
		{in: "apps.example.internal", err: "must start with a single"},
		{in: "https://*.apps.example.internal", err: "without a scheme"},
		{in: "*.apps.example.internal/x", err: "host name pattern only"},
		{in: "*", err: "needs a domain"},
		{in: "*.", err: "needs a domain"},
		{in: "*.*.example", err: "single"},
		{in: "a*.example", err: "must start"},
		{in: "*.ex_ample.internal", err: "not a host name label"},
		{in: "*.apps.internal:0", err: "bad port"},
	} {
		w, err := ParseWildcard(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseWildcard(%q): got %v, want an error containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseWildcard(%q): %v", tc.in, err)
			continue
		}
		if got := w.HostPattern(access); got != tc.pattern {
			t.Errorf("ParseWildcard(%q).HostPattern: got %q, want %q", tc.in, got, tc.pattern)
		}
		if got := w.CertificateName(); got != tc.cert {
			t.Errorf("ParseWildcard(%q).CertificateName: got %q, want %q", tc.in, got, tc.cert)
		}
	}
}

func TestWildcardMatch(t *testing.T) {
	dot, _ := ParseWildcard("*.apps.example.internal")
	dash, _ := ParseWildcard("*-apps.example.internal")
	for _, tc := range []struct {
		w    Wildcard
		host string
		sub  string
		ok   bool
	}{
		{dot, "web--main--dev--alice.apps.example.internal", "web--main--dev--alice", true},
		{dot, "Web--Main--Dev--Alice.APPS.example.internal:3443", "web--main--dev--alice", true},
		{dot, "web--main--dev--alice.apps.example.internal.", "web--main--dev--alice", true},
		{dot, "apps.example.internal", "", false},
		{dot, "a.b.apps.example.internal", "", false},
		{dot, "web.example.internal", "", false},
		{dot, "web.apps.example.internal.evil", "", false},
		{dash, "web--main--dev--alice-apps.example.internal", "web--main--dev--alice", true},
		{dash, "-apps.example.internal", "", false},
		{dash, "web.apps.example.internal", "", false},
		{Wildcard{}, "web.apps.example.internal", "", false},
	} {
		sub, ok := tc.w.Match(tc.host)
		if sub != tc.sub || ok != tc.ok {
			t.Errorf("%s.Match(%q): got %q, %v, want %q, %v", tc.w, tc.host, sub, ok, tc.sub, tc.ok)
		}
	}
	if got := dash.SampleHost(); got != "app--main--ws--owner-apps.example.internal" {
		t.Errorf("SampleHost: got %q", got)
	}
}

func TestParseAppHost(t *testing.T) {
	for _, tc := range []struct {
		in    string
		want  AppHost
		port  uint16
		https bool
		err   bool
	}{
		{in: "web--main--dev--alice", want: AppHost{SlugOrPort: "web", Agent: "main", Workspace: "dev", Owner: "alice"}},
		{in: "web--dev--alice", want: AppHost{SlugOrPort: "web", Workspace: "dev", Owner: "alice"}},
		{in: "code-server--my-agent--my-ws--al-ice", want: AppHost{SlugOrPort: "code-server", Agent: "my-agent", Workspace: "my-ws", Owner: "al-ice"}},
		{in: "8080--main--dev--alice", want: AppHost{SlugOrPort: "8080", Agent: "main", Workspace: "dev", Owner: "alice"}, port: 8080},
		{in: "8443s--main--dev--alice", want: AppHost{SlugOrPort: "8443s", Agent: "main", Workspace: "dev", Owner: "alice"}, port: 8443, https: true},
		{in: "80--main--dev--alice", want: AppHost{SlugOrPort: "80", Agent: "main", Workspace: "dev", Owner: "alice"}}, // a slug, as in Coder
		{in: "pre---web--main--dev--alice", want: AppHost{Prefix: "pre---", SlugOrPort: "web", Agent: "main", Workspace: "dev", Owner: "alice"}},
		{in: "8080--dev--alice", err: true}, // a port needs its agent
		{in: "web--alice", err: true},
		{in: "web", err: true},
		{in: "web---main--dev--alice", want: AppHost{Prefix: "web---", SlugOrPort: "main", Workspace: "dev", Owner: "alice"}},
		{in: "-web--main--dev--alice", err: true},
		{in: "web--main--dev--alice--x", err: true},
		{in: "w_b--main--dev--alice", err: true},
		{in: "", err: true},
	} {
		h, err := ParseAppHost(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("ParseAppHost(%q): got %+v, want an error", tc.in, h)
			}
			continue
		}
		if err != nil || h != tc.want {
			t.Errorf("ParseAppHost(%q): got %+v, %v, want %+v", tc.in, h, err, tc.want)
			continue
		}
		if h.String() != tc.in {
			t.Errorf("ParseAppHost(%q).String(): got %q", tc.in, h.String())
		}
		port, https, ok := h.Port()
		if port != tc.port || https != tc.https || ok != (tc.port != 0) {
			t.Errorf("ParseAppHost(%q).Port(): got %d, %v, %v, want %d, %v", tc.in, port, https, ok, tc.port, tc.https)
		}
	}
}

func TestSubdomainName(t *testing.T) {
	if got := SubdomainName("Web", "main", "Dev", "alice"); got != "web--main--dev--alice" {
		t.Errorf("got %q", got)
	}
	for _, bad := range [][4]string{{"web", "main", "dev", "al--ice"}, {"web", "main_1", "dev", "alice"}, {"", "main", "dev", "alice"}} {
		if got := SubdomainName(bad[0], bad[1], bad[2], bad[3]); got != "" {
			t.Errorf("SubdomainName(%q): got %q, want \"\"", bad, got)
		}
	}
}

// FuzzParseAppHost: whatever parses formats back to itself, and names
// made by SubdomainName parse back to their parts.
func FuzzParseAppHost(f *testing.F) {
	for _, s := range []string{"web--main--dev--alice", "8080s--a--b--c", "p---x--y--z", "a--b--c", "---", "a-b--c-d--e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseAppHost(s)
		if err != nil {
			return
		}
		if h.String() != s {
			t.Fatalf("ParseAppHost(%q).String() = %q", s, h.String())
		}
		if h.IsPort() && h.Agent == "" {
			t.Fatalf("ParseAppHost(%q): a port without an agent", s)
		}
		if name := SubdomainName(h.SlugOrPort, h.Agent, h.Workspace, h.Owner); h.Prefix == "" && h.Agent != "" && name != strings.ToLower(s) {
			t.Fatalf("SubdomainName of %q: got %q", s, name)
		}
	})
}
