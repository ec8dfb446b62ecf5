package controlplane

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"airgapcoder/coderd"
	"airgapcoder/internal/egress"
	"airgapcoder/internal/testidp"
)

func TestOIDCConfig(t *testing.T) {
	base := coderd.OIDCConfig{IssuerURL: "https://idp.example", ClientID: "coder", ClientSecret: "s"}
	for _, tc := range []struct {
		name string
		cfg  OIDCConfig
		want string
	}{
		{"off", OIDCConfig{}, ""},
		{"on", OIDCConfig{OIDCConfig: base}, ""},
		{"client without issuer", OIDCConfig{OIDCConfig: coderd.OIDCConfig{ClientID: "c"}}, "--oidc-issuer-url is empty"},
		{"bad issuer", OIDCConfig{OIDCConfig: coderd.OIDCConfig{IssuerURL: "idp.example", ClientID: "c", ClientSecret: "s"}}, "absolute https URL"},
		{"no client id", OIDCConfig{OIDCConfig: coderd.OIDCConfig{IssuerURL: "https://idp.example", ClientSecret: "s"}}, "--oidc-client-id is empty"},
		{"no secret", OIDCConfig{OIDCConfig: coderd.OIDCConfig{IssuerURL: "https://idp.example", ClientID: "c"}}, "--oidc-client-secret-file"},
		{"group sync", OIDCConfig{OIDCConfig: withFields(base, "groups", "roles"), GroupMappingJSON: `{"a":"b"}`, GroupRegexFilter: ".*", AllowedGroups: []string{"a"}, UserRoleMappingJSON: `{"x":["owner"]}`}, ""},
		{"bad group mapping", OIDCConfig{OIDCConfig: withFields(base, "groups", ""), GroupMappingJSON: `["a"]`}, "--oidc-group-mapping must be a JSON object"},
		{"bad regex", OIDCConfig{OIDCConfig: withFields(base, "groups", ""), GroupRegexFilter: "("}, "--oidc-group-regex-filter"},
		{"allowed groups without field", OIDCConfig{OIDCConfig: base, AllowedGroups: []string{"a"}}, "need --oidc-group-field"},
		{"unknown role", OIDCConfig{OIDCConfig: withFields(base, "", "roles"), UserRoleMappingJSON: `{"x":["auditor"]}`}, `"auditor", which is not a role here`},
		{"role mapping without field", OIDCConfig{OIDCConfig: base, UserRoleMappingJSON: `{"x":["owner"]}`}, "needs --oidc-user-role-field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.check()
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}

	synced, err := OIDCConfig{OIDCConfig: withFields(base, "groups", "roles"), GroupMappingJSON: `{"idp-devs":"devs"}`, GroupAutoCreate: true,
		GroupRegexFilter: "^d", AllowedGroups: []string{"idp-devs"}, UserRoleMappingJSON: `{"idp-admins":["template-admin"]}`}.coderd()
	if err != nil || synced.GroupSync.Mapping["idp-devs"] != "devs" || !synced.GroupSync.AutoCreate || synced.GroupSync.RegexFilter.String() != "^d" ||
		len(synced.GroupSync.AllowedGroups) != 1 || synced.UserRoleMapping["idp-admins"][0] != "template-admin" || synced.GroupField != "groups" {
		t.Errorf("group and role sync: got %+v, %v", synced, err)
	}

	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := OIDCConfig{OIDCConfig: base, ClientSecretFile: secret}.coderd()
	if err != nil || got.ClientSecret != "from-file" || got.HTTPClient == nil {
		t.Errorf("secret file: got %+v, %v", got, err)
	}
	notPEM := filepath.Join(dir, "trust.pem")
	if err := os.WriteFile(notPEM, []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (OIDCConfig{OIDCConfig: base, TrustFile: notPEM}).coderd(); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Errorf("bad trust file: got %v", err)
	}
	if _, err := (OIDCConfig{OIDCConfig: base, ClientSecretFile: filepath.Join(dir, "missing")}).coderd(); err == nil || !strings.Contains(err.Error(), "--oidc-client-secret-file") {
		t.Errorf("missing secret file: got %v", err)
	}
}

// TestOIDCClientTrust: the client the control plane builds for the IdP
// trusts the trust file it is given (the appliance's certs/trust.pem, here
// the test IdP's CA) and nothing else, and dials through the egress guard.
func TestOIDCClientTrust(t *testing.T) {
	idp := testidp.Start(t)
	base := coderd.OIDCConfig{IssuerURL: idp.Issuer, ClientID: idp.ClientID, ClientSecret: idp.ClientSecret}
	guard, err := egress.New(nil, nil) // loopback only, where the IdP is
	if err != nil {
		t.Fatal(err)
	}
	discover := func(cfg OIDCConfig) error {
		t.Helper()
		c, err := cfg.coderd()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.HTTPClient.CloseIdleConnections)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = oidc.NewProvider(oidc.ClientContext(ctx, c.HTTPClient), idp.Issuer)
		return err
	}
	if err := discover(OIDCConfig{OIDCConfig: base, TrustFile: idp.CAFile, Egress: guard}); err != nil {
		t.Errorf("with the IdP's CA trusted: %v", err)
	}
	var unknown x509.UnknownAuthorityError
	if err := discover(OIDCConfig{OIDCConfig: base, Egress: guard}); !errors.As(err, &unknown) {
		t.Errorf("with the system roots: got %v, want x509.UnknownAuthorityError", err)
	}
}

// withFields is c with the group and role claim fields set.
func withFields(c coderd.OIDCConfig, group, role string) coderd.OIDCConfig {
	c.GroupField, c.UserRoleField = group, role
	return c
}
