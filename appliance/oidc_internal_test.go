package appliance

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOIDCConfig: appliance.yaml takes coder server's oidc-* keys with
// Coder's defaults, adds the issuer's host to egress-allow, refuses an
// incomplete setting, keeps the secret out of the overview, and hands the
// control plane the trust store.
func TestOIDCConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("oidc-issuer-url: https://IdP.corp.example/realms/x\noidc-client-id: coder\noidc-client-secret: planted-secret\n" +
		"oidc-email-domain: [corp.example]\ndisable-password-auth: true\negress-allow: [git.corp.example]\n")
	c, err := LoadConfig(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.OIDCAllowSignups || c.OIDCUsernameField != "preferred_username" || c.OIDCEmailField != "email" || c.OIDCSignInText != "OpenID Connect" ||
		!slices.Equal(c.OIDCScopes, []string{"openid", "profile", "email"}) || !c.DisablePasswordAuth {
		t.Errorf("defaults: got %+v", c)
	}
	if !slices.Equal(c.EgressAllow, []string{"git.corp.example", "idp.corp.example"}) {
		t.Errorf("egress-allow: got %q, want the issuer's host added", c.EgressAllow)
	}
	for k, v := range redactedConfig(c) {
		if s, ok := v.(string); ok && strings.Contains(s, "planted") {
			t.Errorf("the overview shows %s: %q", k, s)
		}
	}
	cp := c.oidc("/dir/certs/trust.pem", nil)
	if cp.IssuerURL != c.OIDCIssuerURL || cp.ClientSecret != "planted-secret" || cp.TrustFile != "/dir/certs/trust.pem" ||
		!strings.Contains(cp.TrustHint, "coder certs import") || !slices.Equal(cp.EmailDomain, []string{"corp.example"}) {
		t.Errorf("control plane config: got %+v", cp)
	}

	for _, tc := range []struct{ body, want string }{
		{"oidc-issuer-url: http://idp.corp.example\noidc-client-id: c\noidc-client-secret: s\n", "want an https URL"},
		{"oidc-issuer-url: https://idp.corp.example\noidc-client-secret: s\n", "oidc-client-id is not"},
		{"oidc-issuer-url: https://idp.corp.example\noidc-client-id: c\n", "neither oidc-client-secret nor oidc-client-secret-file"},
		{"oidc-issuer-url: https://idp.corp.example\noidc-client-id: c\noidc-client-secret: s\noidc-group-field: groups\noidc-group-mapping: 'x'\n", "oidc-group-mapping must be a JSON object"},
		{"oidc-issuer-url: https://idp.corp.example\noidc-client-id: c\noidc-client-secret: s\noidc-user-role-field: roles\noidc-user-role-mapping: '{\"a\": [\"user-admin\"]}'\n", "oidc-user-role-mapping: \"a\" maps to \"user-admin\""},
	} {
		write(tc.body)
		if _, err := LoadConfig(dir, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error saying %q", tc.body, err, tc.want)
		}
	}
	write("oidc-issuer-url: https://idp.corp.example\noidc-client-id: c\noidc-client-secret: s\n" +
		"oidc-group-field: groups\noidc-group-mapping: '{\"idp-devs\": \"devs\"}'\noidc-group-auto-create: true\noidc-group-regex-filter: '^d'\n" +
		"oidc-allowed-groups: [idp-devs, idp-ops]\noidc-user-role-field: roles\noidc-user-role-mapping: '{\"idp-admins\": [\"template-admin\"]}'\n")
	if c, err = LoadConfig(dir, nil); err != nil {
		t.Fatal(err)
	}
	cp = c.oidc("x", nil)
	if cp.GroupField != "groups" || cp.UserRoleField != "roles" || cp.GroupMappingJSON != `{"idp-devs": "devs"}` || !cp.GroupAutoCreate ||
		cp.GroupRegexFilter != "^d" || !slices.Equal(cp.AllowedGroups, []string{"idp-devs", "idp-ops"}) || cp.UserRoleMappingJSON != `{"idp-admins": ["template-admin"]}` {
		t.Errorf("group and role sync keys: got %+v", cp)
	}
	write("provisioner-daemons: 1\n")
	if c, err := LoadConfig(dir, nil); err != nil || len(c.EgressAllow) != 0 || c.oidc("x", nil).Enabled() {
		t.Errorf("without OIDC: got %+v, %v", c, err)
	}
}
