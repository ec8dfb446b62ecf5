package appliance

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"airgapcoder/coderd"
	"airgapcoder/controlplane"
	"airgapcoder/internal/egress"
)

// oidcTrustHint is what a certificate error at the identity provider
// advises on the appliance.
const oidcTrustHint = "import the identity provider's CA certificate with `coder certs import FILE --dir DIR`, then restart `coder appliance up`"

// validateOIDC checks the oidc-* keys (OIDC is off without
// oidc-issuer-url).
func (c Config) validateOIDC() error {
	if c.OIDCIssuerURL == "" {
		return nil
	}
	u, err := url.Parse(c.OIDCIssuerURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("oidc-issuer-url %q: want an https URL", c.OIDCIssuerURL)
	}
	if c.OIDCClientID == "" {
		return errors.New("oidc-issuer-url is set but oidc-client-id is not")
	}
	if c.OIDCClientSecret == "" && c.OIDCClientSecretFile == "" {
		return errors.New("oidc-issuer-url is set but neither oidc-client-secret nor oidc-client-secret-file is")
	}
	if _, err := coderd.ParseGroupSyncOptions(c.OIDCGroupMapping, c.OIDCGroupAutoCreate, c.OIDCGroupRegexFilter, c.OIDCAllowedGroups); err != nil {
		return errors.New(strings.ReplaceAll(err.Error(), "--oidc-", "oidc-"))
	}
	if _, err := coderd.ParseUserRoleMapping(c.OIDCUserRoleMapping); err != nil {
		return errors.New(strings.ReplaceAll(err.Error(), "--oidc-", "oidc-"))
	}
	return nil
}

// issuerHosts is the issuer's host (none when OIDC is off): naming the
// identity provider is allowing the appliance to reach it.
func (c Config) issuerHosts() []string {
	u, err := url.Parse(c.OIDCIssuerURL)
	if c.OIDCIssuerURL == "" || err != nil || u.Hostname() == "" {
		return nil
	}
	return []string{strings.ToLower(u.Hostname())}
}

// allowHosts returns allow with hosts added (lower case, each once): the
// hosts of the providers appliance.yaml names (the OIDC issuer, the
// external auth servers), which naming allows.
func allowHosts(allow []string, hosts ...string) []string {
	out := allow
	for _, h := range hosts {
		h = strings.ToLower(h)
		if h == "" || slices.Contains(out, h) {
			continue
		}
		if len(out) == len(allow) {
			out = slices.Clone(allow) // never append into the caller's array
		}
		out = append(out, h)
	}
	return out
}

// oidc is the control plane's OIDC configuration: the provider is reached
// through guard and trusted through trustFile (certs/trust.pem).
func (c Config) oidc(trustFile string, guard *egress.Guard) controlplane.OIDCConfig {
	if c.OIDCIssuerURL == "" {
		return controlplane.OIDCConfig{}
	}
	return controlplane.OIDCConfig{
		OIDCConfig: coderd.OIDCConfig{
			IssuerURL: c.OIDCIssuerURL, ClientID: c.OIDCClientID, ClientSecret: c.OIDCClientSecret, EmailDomain: c.OIDCEmailDomain,
			Scopes: c.OIDCScopes, AllowSignups: c.OIDCAllowSignups, UsernameField: c.OIDCUsernameField, EmailField: c.OIDCEmailField,
			IgnoreEmailVerified: c.OIDCIgnoreEmailVerified, SignInText: c.OIDCSignInText, IconURL: c.OIDCIconURL, TrustHint: oidcTrustHint,
			GroupField: c.OIDCGroupField, UserRoleField: c.OIDCUserRoleField,
		},
		ClientSecretFile: c.OIDCClientSecretFile, TrustFile: trustFile, Egress: guard,
		GroupMappingJSON: c.OIDCGroupMapping, GroupAutoCreate: c.OIDCGroupAutoCreate, GroupRegexFilter: c.OIDCGroupRegexFilter,
		AllowedGroups: c.OIDCAllowedGroups, UserRoleMappingJSON: c.OIDCUserRoleMapping,
	}
}
