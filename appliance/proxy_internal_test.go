package appliance

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// proxyBase is a valid proxy config; the cases add to it.
const proxyBase = "role: proxy\nprimary-access-url: https://coder.example.internal\nproxy-session-token-file: /etc/coder/proxy-token\n" +
	"access-url: https://eu.example.internal:3443\nhosts: [eu.example.internal]\n"

// TestProxyConfig: role: proxy needs the primary's https URL and a token,
// refuses what only a primary runs (naming every such key), and a primary
// refuses the proxy's keys. Errors name the key and say what to do.
func TestProxyConfig(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       []string // substrings of the error; none: accepted
	}{
		{name: "valid proxy", body: proxyBase},
		{name: "valid proxy, inline token", body: strings.Replace(proxyBase, "proxy-session-token-file: /etc/coder/proxy-token", "proxy-session-token: 0d6e:s3cr3t", 1)},
		{name: "install's template plus proxy keys", body: "", want: nil}, // filled below
		{name: "proxy with ca file and wildcard", body: proxyBase + "primary-ca-file: /etc/coder/primary-ca.pem\nwildcard-access-url: \"*.eu.example.internal\"\n"},
		{name: "primary defaults", body: "provisioner-daemons: 3\n"},
		{name: "unknown role", body: "role: replica\n", want: []string{`role "replica"`, "want primary (the default) or proxy"}},
		{name: "proxy without primary", body: strings.Replace(proxyBase, "primary-access-url: https://coder.example.internal\n", "", 1),
			want: []string{"primary-access-url is required with role: proxy"}},
		{name: "proxy with http primary", body: strings.Replace(proxyBase, "https://coder.example", "http://coder.example", 1),
			want: []string{`primary-access-url "http://coder.example.internal"`, "https"}},
		{name: "proxy without token", body: strings.Replace(proxyBase, "proxy-session-token-file: /etc/coder/proxy-token\n", "", 1),
			want: []string{"proxy-session-token-file is required", "coder wsproxy create", "0600"}},
		{name: "proxy with both tokens", body: proxyBase + "proxy-session-token: a:b\n",
			want: []string{"proxy-session-token and proxy-session-token-file are both set"}},
		{name: "proxy with a malformed token", body: strings.Replace(proxyBase, "proxy-session-token-file: /etc/coder/proxy-token", "proxy-session-token: hunter2", 1),
			want: []string{"proxy-session-token: it is not a proxy token"}},
		{name: "proxy with primary-only keys",
			body: proxyBase + "postgres-url: postgres://db/coder\nprovisioner-daemons: 2\noidc-issuer-url: https://idp.example.internal\noidc-client-id: c\noidc-client-secret-file: /f\nmirror-address: 127.0.0.1:9443\n",
			want: []string{"mirror-address, provisioner-daemons, postgres-url, oidc-issuer-url, oidc-client-id, oidc-client-secret-file:", "remove them"}},
		{name: "proxy with external auth", body: proxyBase + "external-auth:\n  - {id: gitea, type: gitea, client-id: x, client-secret: y, auth-url: https://git.example.internal/login/oauth/authorize}\n",
			want: []string{"external-auth: role: proxy runs no PostgreSQL"}},
		{name: "primary with proxy keys", body: "primary-access-url: https://coder.example.internal\nproxy-session-token-file: /f\n",
			want: []string{"primary-access-url, proxy-session-token-file: only a workspace proxy uses them: set role: proxy, or remove them"}},
		{name: "proxy undoing the air gap", body: proxyBase + "telemetry: true\n", want: []string{"telemetry: true is not allowed"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			body := tt.body
			if tt.name == "install's template plus proxy keys" {
				// A primary's appliance.yaml, as install writes it, turned
				// into a proxy's: its uncommented defaults pass.
				if err := WriteDefaultConfig(dir); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
				if err != nil {
					t.Fatal(err)
				}
				body = strings.NewReplacer("role: primary\n", "", "hosts: []\n", "").Replace(string(b)) + proxyBase
			}
			if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := LoadConfig(dir, nil)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("got %v, want it accepted", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %+v accepted, want an error with %q", c, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestProxyConfigOverride: `coder appliance up --proxy` is the override
// role=proxy; the primary's host is then allowed out of the egress guard.
func TestProxyConfigOverride(t *testing.T) {
	dir := t.TempDir()
	body := strings.Replace(proxyBase, "role: proxy\n", "", 1)
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(dir, nil); err == nil || !strings.Contains(err.Error(), "set role: proxy") {
		t.Fatalf("without the override: got %v, want the proxy keys refused", err)
	}
	c, err := LoadConfig(dir, map[string]any{"role": RoleProxy})
	if err != nil {
		t.Fatalf("with role=proxy: %v", err)
	}
	if !c.IsProxy() {
		t.Errorf("got role %q, want proxy", c.Role)
	}
	if got := strings.Join(c.EgressAllow, ","); !strings.Contains(got, "coder.example.internal") {
		t.Errorf("egress-allow %q: want the primary's host in it", got)
	}
}

// TestReadProxyToken: the token file must exist, hold a token, and not be
// readable by others; the error never shows the token.
func TestReadProxyToken(t *testing.T) {
	const token = "3f1e0c2a-0000-4000-8000-000000000001:Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MDEy"
	for _, tt := range []struct {
		name, content string
		mode          os.FileMode
		missing       bool
		want          string // error substring; "" accepted
	}{
		{name: "0600", content: token + "\n", mode: 0o600},
		{name: "0640", content: token, mode: 0o640},
		{name: "world readable", content: token, mode: 0o644, want: "has mode 0644, readable or writable by every user of the host: chmod 600"},
		{name: "empty", content: " \n", mode: 0o600, want: "is empty"},
		{name: "not a token", content: "hunter2", mode: 0o600, want: "it is not a proxy token"},
		{name: "missing", missing: true, want: "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "proxy-token")
			if !tt.missing {
				if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.mode); err != nil {
					t.Fatal(err)
				}
			}
			u := &upRun{cfg: Config{Role: RoleProxy, ProxySessionTokenFile: path}}
			err := u.readProxyToken(context.Background())
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want the token read", err)
			case tt.want == "" && u.proxyToken != token:
				t.Fatalf("got token %q, want %q", u.proxyToken, token)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "proxy-session-token-file")):
				t.Fatalf("got %v, want an error naming proxy-session-token-file with %q", err, tt.want)
			case err != nil && strings.Contains(err.Error(), "Zm9v"):
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}
}

// TestProxyHasNoDatabase: backup, restore and reset-password on a proxy
// are refused, pointing at the primary, before anything starts a
// database in DIR.
func TestProxyHasNoDatabase(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(proxyBase), 0o644); err != nil {
		t.Fatal(err)
	}
	called := false
	err := withDatabase(context.Background(), dir, nil, false, func(pgInfo) error { called = true; return nil })
	if err == nil || called || !strings.Contains(err.Error(), "it has no database; run this on the primary (https://coder.example.internal)") {
		t.Fatalf("got %v (fn called: %v), want a refusal naming the primary", err, called)
	}
	if _, err := os.Stat(Layout{Dir: dir}.Postgres()); err == nil {
		t.Errorf("%s exists: want no database folder on a proxy", Layout{Dir: dir}.Postgres())
	}
}
