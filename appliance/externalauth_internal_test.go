package appliance

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestExternalAuthConfig: appliance.yaml's external-auth list takes
// coder server's CODER_EXTERNAL_AUTH_<n>_* fields in kebab-case, adds the
// servers' hosts to egress-allow, keeps the secret out of the overview,
// survives being written back, and hands the control plane the trust
// store.
func TestExternalAuthConfig(t *testing.T) {
	dir := t.TempDir()
	body := `egress-allow: [proxy.corp.example]
external-auth:
  - id: corp-git
    type: gitea
    client-id: cid
    client-secret: planted-secret
    auth-url: https://Git.corp.example/login/oauth/authorize
    token-url: https://git.corp.example/login/oauth/access_token
    validate-url: https://git.corp.example/api/v1/user
    regex: ^https://git\.corp\.example/
    scopes: [read:user, write:repository]
    display-name: Corp Git
    display-icon: /icon/gitea.svg
    no-refresh: true
    extra-token-keys: [scope]
  - type: gitlab
    client-id: gl
    client-secret-file: /etc/coder/gitlab-secret
    auth-url: https://gitlab.corp.example/oauth/authorize
    token-url: https://gitlab.corp.example/oauth/token
    validate-url: https://gitlab.corp.example/oauth/token/info
`
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []ExternalAuthProvider{{
		ID: "corp-git", Type: "gitea", ClientID: "cid", ClientSecret: "planted-secret",
		AuthURL: "https://Git.corp.example/login/oauth/authorize", TokenURL: "https://git.corp.example/login/oauth/access_token",
		ValidateURL: "https://git.corp.example/api/v1/user", Regex: `^https://git\.corp\.example/`,
		Scopes: []string{"read:user", "write:repository"}, DisplayName: "Corp Git", DisplayIcon: "/icon/gitea.svg",
		NoRefresh: true, ExtraTokenKeys: []string{"scope"},
	}, {
		Type: "gitlab", ClientID: "gl", ClientSecretFile: "/etc/coder/gitlab-secret",
		AuthURL: "https://gitlab.corp.example/oauth/authorize", TokenURL: "https://gitlab.corp.example/oauth/token",
		ValidateURL: "https://gitlab.corp.example/oauth/token/info",
	}}
	if !reflect.DeepEqual(c.ExternalAuth, want) {
		t.Errorf("external-auth:\ngot  %+v\nwant %+v", c.ExternalAuth, want)
	}
	if want := []string{"proxy.corp.example", "git.corp.example", "gitlab.corp.example"}; !slices.Equal(c.EgressAllow, want) {
		t.Errorf("egress-allow: got %q, want %q (the servers' hosts added)", c.EgressAllow, want)
	}

	overview, err := json.Marshal(redactedConfig(c))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(overview), "planted") || !strings.Contains(string(overview), `"client-id":"cid"`) {
		t.Errorf("the overview's external-auth: got %s, want the client id shown and the secret redacted", overview)
	}

	cp := c.externalAuth("/dir/certs/trust.pem", nil)
	if len(cp.Providers) != 2 || cp.TrustFile != "/dir/certs/trust.pem" || cp.Providers[0].ClientSecret != "planted-secret" ||
		cp.Providers[0].ID != "corp-git" || !cp.Providers[0].NoRefresh || !slices.Equal(cp.Providers[0].Scopes, want[0].Scopes) ||
		cp.Providers[1].ClientSecretFile != "/etc/coder/gitlab-secret" || cp.Providers[1].ValidateURL != want[1].ValidateURL {
		t.Errorf("control plane config: got %+v", cp)
	}

	// Written back with one key per field, it loads to the same Config
	// (as FuzzLoadConfig checks of every config).
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), canonicalApplianceYAML(t, c), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := LoadConfig(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(comparableAppliance(c), comparableAppliance(again)) {
		t.Errorf("written back:\ngot  %+v\nwant %+v", again, c)
	}

	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte("provisioner-daemons: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := LoadConfig(dir, nil); err != nil || len(c.ExternalAuth) != 0 || len(c.externalAuth("x", nil).Providers) != 0 || len(c.EgressAllow) != 0 {
		t.Errorf("without external-auth: got %+v, %v", c, err)
	}
}

// TestExternalAuthConfigErrors: what install and up refuse, each error
// naming the entry's key.
func TestExternalAuthConfigErrors(t *testing.T) {
	const urls = "    auth-url: https://git.corp.example/a\n    token-url: https://git.corp.example/t\n    validate-url: https://git.corp.example/v\n"
	for _, tc := range []struct{ name, body, want string }{
		{"no client id", "external-auth:\n  - type: gitea\n" + urls, `external-auth[0].client-id: provider "gitea" has no client id`},
		{"no type", "external-auth:\n  - client-id: c\n" + urls, "external-auth[0].type: set the provider's type"},
		{"bad id", "external-auth:\n  - id: corp git\n    type: gitea\n    client-id: c\n" + urls, `external-auth[0].id: "corp git" is not a valid provider id`},
		{"same id", "external-auth:\n  - type: gitea\n    client-id: c\n" + urls + "  - type: gitea\n    client-id: d\n" + urls, `external-auth[1].id: provider id "gitea" is already provider 0's`},
		{"bad regex", "external-auth:\n  - type: gitea\n    client-id: c\n    regex: 'git('\n" + urls, "external-auth[0].regex: error parsing regexp"},
		{"public defaults", "external-auth:\n  - type: gitlab\n    client-id: c\n", `external-auth[0].auth-url is not set, and type "gitlab" defaults it to https://gitlab.com/oauth/authorize, which the appliance does not reach: set it to your Git server's`},
		{"a public default", "external-auth:\n  - type: azure-devops\n    client-id: c\n    auth-url: https://ado.corp.example/oauth2/authorize\n",
			`external-auth[0].token-url is not set, and type "azure-devops" defaults it to https://app.vssps.visualstudio.com/oauth2/token`},
		{"generic without URLs", "external-auth:\n  - type: corp-oauth\n    client-id: c\n", `external-auth[0].auth-url: provider "corp-oauth" of type "corp-oauth" needs it (no default derives it)`},
		{"http", "external-auth:\n  - type: gitea\n    client-id: c\n    auth-url: http://git.corp.example/a\n    token-url: https://git.corp.example/t\n    validate-url: https://git.corp.example/v\n", `external-auth[0].auth-url "http://git.corp.example/a": want an https URL`},
		{"relative URL", "external-auth:\n  - type: gitea\n    client-id: c\n    auth-url: /a\n    token-url: https://git.corp.example/t\n    validate-url: https://git.corp.example/v\n", `external-auth[0].auth-url: "/a" is not an absolute http(s) URL`},
		{"unknown key", "external-auth:\n  - type: gitea\n    clientid: c\n    client-secrets: s\n" + urls, "external-auth[0]: unknown key(s) client-secrets, clientid; known keys: id, type, client-id"},
		{"not a list", "external-auth:\n  type: gitea\n", "external-auth: want a list of providers"},
		{"entry not a map", "external-auth: [gitea]\n", "external-auth[0]: want a map of id, type"},
		{"bad bool", "external-auth:\n  - type: gitea\n    client-id: c\n    no-refresh: sometimes\n" + urls, "no-refresh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, ConfigFile)
			if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(dir, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("got %v, want an error naming %s and saying %q", err, path, tc.want)
			}
		})
	}
}

// TestExternalAuthConfigDerived: for a self-hosted Git server, auth-url
// is enough (its type derives the rest on the same host); a public
// default is accepted only when egress-allow lets the appliance reach it.
func TestExternalAuthConfigDerived(t *testing.T) {
	for _, body := range []string{
		"external-auth:\n  - type: gitea\n    client-id: c\n    auth-url: https://git.corp.example/login/oauth/authorize\n",
		"external-auth:\n  - type: gitlab\n    client-id: c\n    auth-url: https://gitlab.corp.example/oauth/authorize\n",
		"egress-allow: [gitlab.com]\nexternal-auth:\n  - type: gitlab\n    client-id: c\n",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadConfig(dir, nil); err != nil {
			t.Errorf("%q: got %v, want it accepted", body, err)
		}
	}
}

// TestExternalAuthDocExample: the appliance.yaml example of
// docs/external-auth.md loads.
func TestExternalAuthDocExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "external-auth.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/external-auth.md has no yaml example")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(example), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(dir, nil)
	if err != nil {
		t.Fatalf("the example: %v", err)
	}
	if len(c.ExternalAuth) != 2 || c.ExternalAuth[0].Regex != `^(https?://)?git\.corp\.example(/.*)?$` {
		t.Errorf("the example: got %+v", c.ExternalAuth)
	}
}

// TestAllowHosts: the named providers' hosts join egress-allow once each,
// in lower case, without writing into the caller's list.
func TestAllowHosts(t *testing.T) {
	allow := make([]string, 1, 8)
	allow[0] = "a.example"
	got := allowHosts(allow, "B.example", "a.example", "b.example", "")
	if want := []string{"a.example", "b.example"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if extended := allow[:2]; extended[1] != "" {
		t.Errorf("allowHosts wrote into the caller's array: %q", extended)
	}
	if got := allowHosts(nil); got != nil {
		t.Errorf("nothing to add: got %q", got)
	}
}
