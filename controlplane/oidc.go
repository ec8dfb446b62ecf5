package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/internal/egress"
)

// OIDCConfig is OpenID Connect sign-in (coderd.OIDCConfig, whose
// HTTPClient the control plane builds), plus where its secret and trust
// come from.
type OIDCConfig struct {
	coderd.OIDCConfig
	// ClientSecretFile holds the client secret (surrounding white space
	// trimmed); it is read at start and wins over ClientSecret.
	ClientSecretFile string
	// TrustFile is a PEM bundle of the CAs the provider's certificate may
	// chain to (the appliance's certs/trust.pem, system roots included);
	// empty means the system's roots.
	TrustFile string
	// Egress, when set, guards the connections to the provider; its
	// allow list must hold the issuer's host.
	Egress *egress.Guard
	// GroupMappingJSON (a JSON object of IdP group to Coder group, "" for
	// none), GroupAutoCreate, GroupRegexFilter ("" for none) and
	// AllowedGroups are the group sync's --oidc-group-mapping,
	// --oidc-group-auto-create, --oidc-group-regex-filter and
	// --oidc-allowed-groups; they become OIDCConfig.GroupSync
	// (coderd.ParseGroupSyncOptions). They apply only with GroupField.
	GroupMappingJSON string
	GroupAutoCreate  bool
	GroupRegexFilter string
	AllowedGroups    []string
	// UserRoleMappingJSON is --oidc-user-role-mapping, a JSON object of
	// IdP role to a list of Coder roles ("" for none); it becomes
	// OIDCConfig.UserRoleMapping (coderd.ParseUserRoleMapping).
	UserRoleMappingJSON string
}

// sync parses the group and role sync options into out.
func (c OIDCConfig) sync(out *coderd.OIDCConfig) error {
	gs, err := coderd.ParseGroupSyncOptions(c.GroupMappingJSON, c.GroupAutoCreate, c.GroupRegexFilter, c.AllowedGroups)
	if err != nil {
		return err
	}
	if c.GroupField == "" && (len(c.AllowedGroups) > 0 || len(gs.Mapping) > 0 || c.GroupAutoCreate) {
		return errors.New("--oidc-allowed-groups, --oidc-group-mapping and --oidc-group-auto-create need --oidc-group-field: set it to the claim that lists the user's groups (often \"groups\")")
	}
	rm, err := coderd.ParseUserRoleMapping(c.UserRoleMappingJSON)
	if err != nil {
		return err
	}
	if c.UserRoleField == "" && len(rm) > 0 {
		return errors.New("--oidc-user-role-mapping needs --oidc-user-role-field: set it to the claim that lists the user's roles")
	}
	out.GroupSync, out.UserRoleMapping = gs, rm
	return nil
}

// check validates the combination (New calls it; it reads no file).
func (c OIDCConfig) check() error {
	if !c.Enabled() {
		if c.ClientID != "" || c.ClientSecret != "" || c.ClientSecretFile != "" {
			return errors.New("--oidc-client-id or --oidc-client-secret is set but --oidc-issuer-url is empty: set the issuer URL to turn OIDC sign-in on")
		}
		return nil
	}
	u, err := url.Parse(c.IssuerURL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("--oidc-issuer-url %q must be an absolute https URL", c.IssuerURL)
	}
	if c.ClientID == "" {
		return errors.New("--oidc-issuer-url is set but --oidc-client-id is empty: set the client ID the identity provider registered")
	}
	if c.ClientSecret == "" && c.ClientSecretFile == "" {
		return errors.New("--oidc-issuer-url is set but neither --oidc-client-secret nor --oidc-client-secret-file is")
	}
	var parsed coderd.OIDCConfig
	return c.sync(&parsed)
}

// coderd returns the API's configuration: the secret read from its file,
// and an HTTP client that trusts TrustFile and dials through Egress.
func (c OIDCConfig) coderd() (coderd.OIDCConfig, error) {
	out := c.OIDCConfig
	if !out.Enabled() {
		return out, nil
	}
	if err := c.sync(&out); err != nil {
		return out, err
	}
	if c.ClientSecretFile != "" {
		b, err := os.ReadFile(c.ClientSecretFile)
		if err != nil {
			return out, fmt.Errorf("--oidc-client-secret-file: %w", err)
		}
		out.ClientSecret = strings.TrimSpace(string(b))
		if out.ClientSecret == "" {
			return out, fmt.Errorf("--oidc-client-secret-file %s is empty", c.ClientSecretFile)
		}
	}
	client, err := providerHTTPClient("OIDC", c.TrustFile, c.Egress)
	if err != nil {
		return out, err
	}
	out.HTTPClient = client
	return out, nil
}

// providerHTTPClient is the client for a provider the deployment signs in
// with or links accounts to (OIDC, external auth): it trusts the CAs in
// trustFile (the appliance's certs/trust.pem; empty means the system's
// roots) and, with a guard, dials through the egress guard. what names
// the provider in errors.
func providerHTTPClient(what, trustFile string, guard *egress.Guard) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if trustFile != "" {
		pem, err := os.ReadFile(trustFile)
		if err != nil {
			return nil, fmt.Errorf("%s trust file: %w", what, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s trust file %s holds no PEM certificate", what, trustFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if guard != nil {
		tr = guard.Wrap(tr)
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, nil
}
