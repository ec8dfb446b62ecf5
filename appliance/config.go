package appliance

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"

	"airgapcoder/coderd/appurl"
	"airgapcoder/internal/atomicfile"
	"airgapcoder/internal/egress"
)

// ConfigFile is the settings file inside DIR.
const ConfigFile = "appliance.yaml"

// Config is DIR/appliance.yaml. Keys are the yaml names below.
type Config struct {
	// Role is what this appliance runs (role): "primary", the default,
	// runs the deployment (PostgreSQL, the mirror, coderd and its
	// provisioners); "proxy" runs a workspace proxy of a primary's
	// deployment and nothing else (proxy.go, docs/wsproxy.md).
	Role string `koanf:"role"`
	// The proxy role's keys, named as coder wsproxy server's flags. Only
	// role: proxy takes them.
	//
	// PrimaryAccessURL is the primary's access URL, https
	// (primary-access-url).
	PrimaryAccessURL string `koanf:"primary-access-url"`
	// ProxySessionToken, or better ProxySessionTokenFile (a file only the
	// user that runs the appliance reads, mode 0600), is the proxy's token
	// as coder wsproxy create printed it (proxy-session-token,
	// proxy-session-token-file). It is never logged.
	ProxySessionToken     string `koanf:"proxy-session-token"`
	ProxySessionTokenFile string `koanf:"proxy-session-token-file"`
	// PrimaryCAFile is a PEM file of the CA that issued the primary's
	// certificate (primary-ca-file; e.g. the primary's DIR/certs/ca.pem),
	// trusted for the primary besides trust.pem (the system roots, this
	// appliance's CA and the CAs coder certs import added). Empty trusts
	// trust.pem only.
	PrimaryCAFile string `koanf:"primary-ca-file"`

	// TLSAddress is where the dashboard, API, dev URLs and agent
	// connections are served over HTTPS with the appliance certificate
	// (tls-address).
	TLSAddress string `koanf:"tls-address"`
	// HTTPAddress is a plain HTTP listener that only redirects to the
	// access URL, /healthz excepted (http-address); "" disables it.
	HTTPAddress string `koanf:"http-address"`
	// AccessURL is how users and workspaces reach the appliance
	// (access-url, https); default: https://<tls-address>, an unspecified
	// host replaced as AdvertisedHost does.
	AccessURL string `koanf:"access-url"`
	// WildcardAccessURL serves subdomain apps on the hosts under it
	// (wildcard-access-url, e.g. "*.apps.example.internal", as coder
	// server's --wildcard-access-url); the serving certificate the
	// appliance CA issues covers it, and the site adds a wildcard DNS
	// record to the appliance. Empty serves none.
	WildcardAccessURL string `koanf:"wildcard-access-url"`
	// MirrorAddress is where the provider mirror and the image registry
	// listen over HTTPS (mirror-address).
	MirrorAddress string `koanf:"mirror-address"`
	// Hosts are the DNS names and IPs the serving certificate covers
	// (hosts); the mirror address's host and localhost are always added.
	Hosts []string `koanf:"hosts"`
	// ProvisionerDaemons is the number of built-in provisioners
	// (provisioner-daemons).
	ProvisionerDaemons int `koanf:"provisioner-daemons"`
	// ServiceUser runs PostgreSQL (and, under systemd, everything) when the
	// appliance is started as root (service-user).
	ServiceUser string `koanf:"service-user"`
	// PostgresURL uses an external database instead of the bundled one
	// (postgres-url).
	PostgresURL string `koanf:"postgres-url"`
	// EgressAllow are the extra destinations (host names, "*.suffix",
	// IPs or CIDRs) the product's HTTP clients may reach (egress-allow).
	// Empty means loopback, Hosts and the hosts of http-address,
	// mirror-address and access-url only; anything else is refused and
	// logged (package internal/egress).
	EgressAllow []string `koanf:"egress-allow"`
	// PrometheusEnable serves Prometheus metrics at /metrics on
	// PrometheusAddress, plain HTTP (prometheus-enable,
	// prometheus-address; default 127.0.0.1:2112). The dashboard's
	// listeners never serve them.
	PrometheusEnable  bool   `koanf:"prometheus-enable"`
	PrometheusAddress string `koanf:"prometheus-address"`

	// OIDC is OpenID Connect sign-in, with coder server's --oidc-* names
	// (oidc-issuer-url, …; docs/oidc.md). The issuer's host is added to
	// egress-allow by itself: naming the identity provider allows it.
	OIDCIssuerURL string `koanf:"oidc-issuer-url"`
	OIDCClientID  string `koanf:"oidc-client-id"`
	// OIDCClientSecret, or better OIDCClientSecretFile (a file only root
	// and the service user read), is the client's secret.
	OIDCClientSecret        string   `koanf:"oidc-client-secret"`
	OIDCClientSecretFile    string   `koanf:"oidc-client-secret-file"`
	OIDCEmailDomain         []string `koanf:"oidc-email-domain"`
	OIDCScopes              []string `koanf:"oidc-scopes"`
	OIDCAllowSignups        bool     `koanf:"oidc-allow-signups"`
	OIDCUsernameField       string   `koanf:"oidc-username-field"`
	OIDCEmailField          string   `koanf:"oidc-email-field"`
	OIDCIgnoreEmailVerified bool     `koanf:"oidc-ignore-email-verified"`
	OIDCSignInText          string   `koanf:"oidc-sign-in-text"`
	OIDCIconURL             string   `koanf:"oidc-icon-url"`
	// The group and role sync (docs/oidc.md): OIDCGroupField and
	// OIDCUserRoleField name the claims and turn each sync on; the
	// mappings are JSON objects in a string, as the flags and Coder's
	// environment variables take them.
	OIDCGroupField       string   `koanf:"oidc-group-field"`
	OIDCGroupMapping     string   `koanf:"oidc-group-mapping"`
	OIDCGroupAutoCreate  bool     `koanf:"oidc-group-auto-create"`
	OIDCGroupRegexFilter string   `koanf:"oidc-group-regex-filter"`
	OIDCAllowedGroups    []string `koanf:"oidc-allowed-groups"`
	OIDCUserRoleField    string   `koanf:"oidc-user-role-field"`
	OIDCUserRoleMapping  string   `koanf:"oidc-user-role-mapping"`
	// DisablePasswordAuth refuses password sign-in but an owner's
	// (disable-password-auth).
	DisablePasswordAuth bool `koanf:"disable-password-auth"`
	// ExternalAuth are the Git servers users link their accounts to
	// (external-auth; docs/external-auth.md), as coder server's
	// CODER_EXTERNAL_AUTH_<n>_* variables. Their hosts are added to
	// egress-allow by themselves.
	ExternalAuth []ExternalAuthProvider `koanf:"external-auth"`

	// The air-gap switches exist so that a config carried over from a
	// connected deployment is refused with a clear message rather than
	// silently ignored. They must stay at these values.
	Telemetry              bool `koanf:"telemetry"`                // must be false
	UpdateCheck            bool `koanf:"update-check"`             // must be false
	BlockDirectConnections bool `koanf:"block-direct-connections"` // must be true
}

// DefaultConfig is what install writes.
func DefaultConfig() Config {
	return Config{
		Role:                   RolePrimary,
		TLSAddress:             "127.0.0.1:3443",
		HTTPAddress:            "127.0.0.1:3000",
		MirrorAddress:          "127.0.0.1:8443",
		ProvisionerDaemons:     3,
		ServiceUser:            "coder",
		BlockDirectConnections: true,
		OIDCScopes:             []string{"openid", "profile", "email"},
		OIDCAllowSignups:       true,
		OIDCUsernameField:      "preferred_username",
		OIDCEmailField:         "email",
		OIDCSignInText:         "OpenID Connect",
	}
}

var knownKeys = map[string]bool{
	"role": true, "primary-access-url": true, "proxy-session-token": true, "proxy-session-token-file": true, "primary-ca-file": true,
	"tls-address": true, "http-address": true, "access-url": true, "wildcard-access-url": true, "mirror-address": true, "hosts": true, "provisioner-daemons": true,
	"service-user": true, "postgres-url": true, "egress-allow": true, "telemetry": true, "update-check": true, "block-direct-connections": true,
	"prometheus-enable": true, "prometheus-address": true,
	"oidc-issuer-url": true, "oidc-client-id": true, "oidc-client-secret": true, "oidc-client-secret-file": true, "oidc-email-domain": true,
	"oidc-scopes": true, "oidc-allow-signups": true, "oidc-username-field": true, "oidc-email-field": true, "oidc-ignore-email-verified": true,
	"oidc-sign-in-text": true, "oidc-icon-url": true, "disable-password-auth": true,
	"oidc-group-field": true, "oidc-group-mapping": true, "oidc-group-auto-create": true, "oidc-group-regex-filter": true,
	"oidc-allowed-groups": true, "oidc-user-role-field": true, "oidc-user-role-mapping": true,
	"external-auth": true,
}

// LoadConfig reads DIR/appliance.yaml over the defaults and applies
// overrides (flag values that were set). It refuses unknown keys and any
// attempt to undo the air gap.
func LoadConfig(dir string, overrides map[string]any) (Config, error) {
	k := koanf.New(".")
	def := DefaultConfig()
	if err := k.Load(confmap.Provider(map[string]any{
		"role":        def.Role,
		"tls-address": def.TLSAddress, "http-address": def.HTTPAddress, "mirror-address": def.MirrorAddress, "provisioner-daemons": def.ProvisionerDaemons,
		"service-user": def.ServiceUser, "block-direct-connections": def.BlockDirectConnections,
		"oidc-scopes": def.OIDCScopes, "oidc-allow-signups": def.OIDCAllowSignups, "oidc-username-field": def.OIDCUsernameField,
		"oidc-email-field": def.OIDCEmailField, "oidc-sign-in-text": def.OIDCSignInText,
	}, "."), nil); err != nil {
		return Config{}, err
	}
	path := filepath.Join(dir, ConfigFile)
	if _, err := os.Stat(path); err == nil {
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return Config{}, fmt.Errorf("read %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return Config{}, err
	}
	if len(overrides) > 0 {
		if err := k.Load(confmap.Provider(overrides, "."), nil); err != nil {
			return Config{}, err
		}
	}
	var unknown []string
	for _, key := range k.Keys() {
		if top := strings.SplitN(key, ".", 2)[0]; !knownKeys[top] {
			unknown = append(unknown, top)
		}
	}
	if len(unknown) > 0 {
		return Config{}, fmt.Errorf("%s: unknown key(s) %s", path, strings.Join(unknown, ", "))
	}
	if err := checkExternalAuthKeys(k.Get("external-auth")); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	var c Config
	if err := k.Unmarshal("", &c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.Validate(path); err != nil {
		return c, err
	}
	c.EgressAllow = allowHosts(c.EgressAllow, append(append(c.issuerHosts(), c.externalAuth("", nil).Hosts()...), c.primaryHosts()...)...)
	return c, nil
}

// Validate checks addresses and refuses settings that would break the air
// gap.
func (c Config) Validate(source string) error {
	var errs []error
	if err := c.validateRole(); err != nil {
		errs = append(errs, err)
	}
	if c.Telemetry {
		errs = append(errs, errors.New("telemetry: true is not allowed on the appliance: it runs offline and sends nothing; remove the key"))
	}
	if c.UpdateCheck {
		errs = append(errs, errors.New("update-check: true is not allowed on the appliance: updates arrive as bundles (coder appliance upgrade); remove the key"))
	}
	if !c.BlockDirectConnections {
		errs = append(errs, errors.New("block-direct-connections: false is not allowed on the appliance: every workspace connection is relayed by coderd; remove the key"))
	}
	for name, addr := range map[string]string{"tls-address": c.TLSAddress, "http-address": c.HTTPAddress, "mirror-address": c.MirrorAddress} {
		if name == "http-address" && addr == "" {
			continue // no redirect listener
		}
		if err := checkListenAddress(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", name, addr, err))
		}
	}
	if c.AccessURL != "" {
		if u, err := url.Parse(c.AccessURL); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("access-url %q: want an https URL (the appliance serves HTTPS on tls-address)", c.AccessURL))
		}
	}
	if _, err := c.wildcard(); err != nil {
		errs = append(errs, err)
	}
	if _, err := egress.New(c.EgressAllow, nil); err != nil {
		errs = append(errs, fmt.Errorf("egress-allow: %w", err))
	}
	if err := c.validateOIDC(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateExternalAuth(); err != nil {
		errs = append(errs, err)
	}
	if c.ProvisionerDaemons < 0 {
		errs = append(errs, fmt.Errorf("provisioner-daemons: %d is negative", c.ProvisionerDaemons))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w", source, errors.Join(errs...))
	}
	return nil
}

// checkListenAddress accepts host:port with a port from 0 to 65535 and a
// host that is empty (every interface), an IP address or a DNS name.
func checkListenAddress(addr string) error {
	const want = `want host:port, e.g. "127.0.0.1:3443" or "0.0.0.0:3443"`
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New(want)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535 (%s)", port, want)
	}
	if host == "" || net.ParseIP(host) != nil {
		return nil
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if label == "" || len(label) > 63 || strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") ||
			strings.ContainsFunc(label, func(r rune) bool {
				return !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
			}) {
			return fmt.Errorf("host %q is not an IP address or a DNS name (%s)", host, want)
		}
	}
	return nil
}

// configTemplate is the commented file install writes.
const configTemplate = `# Settings of this appliance. Every key is optional; the values shown are
# the defaults. Restart the appliance (coder appliance up) after a change.

# primary runs the deployment: PostgreSQL, the mirror, coderd and its
# provisioners. proxy runs only a workspace proxy (a region) of a primary's
# deployment (docs/wsproxy.md): create it on the primary with
# coder wsproxy create NAME, then set the keys below, uncommented, and
# tls-address, access-url, hosts (and wildcard-access-url) for the proxy.
# The primary-only keys (mirror-address, provisioner-daemons,
# postgres-url, prometheus-*, oidc-*, disable-password-auth,
# external-auth) must then stay at their defaults.
role: primary
# primary-access-url: https://coder.example.internal
# proxy-session-token-file: /etc/coder/proxy-token   # owned by service-user, mode 0600
# primary-ca-file: /etc/coder/primary-ca.pem         # the primary's certs/ca.pem

# Where the dashboard, the API, dev URLs and agent connections are served,
# over HTTPS with the appliance certificate (certs/server.pem), and how users
# and workspaces reach them (default https://<tls-address>).
tls-address: %q
# access-url: https://coder.example.internal
# Subdomain apps (coder_app subdomain = true, share levels): each app on a
# host of its own under this name; add a wildcard DNS record for it that
# points at this appliance. The serving certificate covers it.
# wildcard-access-url: "*.apps.example.internal"

# Plain HTTP: it only redirects to the access URL (308), except /healthz.
# "" turns it off.
http-address: %q

# Where the provider mirror (/terraform/providers/) and the image registry
# (/v2/) listen, over HTTPS with the appliance certificate.
mirror-address: %q

# Extra DNS names and IPs for the serving certificate. With a wildcard
# address (0.0.0.0:PORT, [::]:PORT) the first one is the name the appliance
# advertises (access URL, image references), else 127.0.0.1.
hosts: []

# Built-in provisioner daemons (0 disables them).
provisioner-daemons: %d

# The unprivileged user that runs PostgreSQL when started as root.
service-user: %q

# An external PostgreSQL instead of the bundled one. With sslmode=verify-full
# its certificate is checked against this appliance's trust store (certs/),
# unless sslrootcert=FILE names the CA.
# postgres-url: postgres://user:password@db.example.internal/coder?sslmode=verify-full

# Where the appliance's own HTTP clients may connect besides loopback, the
# hosts above and the hosts of http-address, mirror-address and access-url:
# host names, "*.suffix", IPs or CIDRs. Anything else is refused and logged.
# egress-allow: ["git.example.internal", "*.corp.example", "10.0.0.0/8"]

# Sign-in with the site's OpenID Connect identity provider (docs/oidc.md),
# as coder server's --oidc-* flags. Register
# <access-url>/api/v2/users/oidc/callback at the provider; import its CA with
# coder certs import. Its host is added to egress-allow by itself.
# oidc-issuer-url: https://idp.example.internal/realms/corp
# oidc-client-id: coder
# oidc-client-secret-file: /etc/coder/oidc-client-secret
# oidc-email-domain: ["example.internal"]
# oidc-allow-signups: true
# oidc-sign-in-text: Corp SSO
# Groups and roles from the IdP's claims, at every sign-in:
# oidc-group-field: groups
# oidc-group-mapping: '{"idp-developers": "developers"}'
# oidc-group-auto-create: false
# oidc-group-regex-filter: "^corp-"
# oidc-allowed-groups: ["coder-users"]
# oidc-user-role-field: roles
# oidc-user-role-mapping: '{"idp-admins": ["template-admin"]}'
# disable-password-auth: false

# Git servers users link their accounts to, so that git in workspaces and
# templates (data "coder_external_auth") get each user's own token
# (docs/external-auth.md), as coder server's CODER_EXTERNAL_AUTH_<n>_*.
# Register <access-url>/external-auth/<id>/callback as the OAuth2
# application's redirect URI; import the server's CA with coder certs
# import. The URLs' hosts are added to egress-allow by themselves.
# external-auth:
#   - id: gitea
#     type: gitea
#     client-id: 0b6c2d5e-…
#     client-secret-file: /etc/coder/gitea-client-secret
#     auth-url: https://git.example.internal/login/oauth/authorize
#     display-name: Example Git
# token-url, validate-url and regex derive from auth-url for gitea, gitlab,
# github and bitbucket-server; other keys: scopes, display-icon, no-refresh,
# extra-token-keys, client-secret.

# Prometheus metrics at http://prometheus-address/metrics (off by default;
# never on the dashboard's listeners).
# prometheus-enable: true
# prometheus-address: 127.0.0.1:2112

# The appliance is offline by design: telemetry and update checks stay off
# and every workspace connection is relayed by coderd. Turning any of these
# back on is refused.
telemetry: false
update-check: false
block-direct-connections: true
`

// WriteDefaultConfig writes DIR/appliance.yaml unless it exists.
func WriteDefaultConfig(dir string) error {
	path := filepath.Join(dir, ConfigFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	d := DefaultConfig()
	body := fmt.Sprintf(configTemplate, d.TLSAddress, d.HTTPAddress, d.MirrorAddress, d.ProvisionerDaemons, d.ServiceUser)
	return atomicfile.Write(path, []byte(body), 0o644)
}

// AdvertisedHost is the name by which clients reach a listener on addr:
// its host, or for an unspecified one (0.0.0.0, ::, empty) the first of
// hosts, else 127.0.0.1. Nothing the appliance advertises (access URL,
// image references, logs) names a wildcard address.
func (c Config) AdvertisedHost(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || !isUnspecified(host) {
		return host
	}
	if len(c.Hosts) > 0 {
		return c.Hosts[0]
	}
	return "127.0.0.1"
}

// wildcard is wildcard-access-url parsed, zero when unset.
func (c Config) wildcard() (appurl.Wildcard, error) {
	if c.WildcardAccessURL == "" {
		return appurl.Wildcard{}, nil
	}
	w, err := appurl.ParseWildcard(c.WildcardAccessURL)
	if err != nil {
		return w, fmt.Errorf("wildcard-access-url: %w", err)
	}
	return w, nil
}

// AccessHost is the host name of the access URL: access-url's, else the
// advertised host of tls-address.
func (c Config) AccessHost() string {
	if u, err := url.Parse(c.AccessURL); err == nil && c.AccessURL != "" {
		return u.Hostname()
	}
	return c.AdvertisedHost(c.TLSAddress)
}

// accessURL is access-url, else https://<advertised tls-address>.
func (c Config) accessURL() string {
	if c.AccessURL != "" {
		return c.AccessURL
	}
	return "https://" + net.JoinHostPort(c.AdvertisedHost(c.TLSAddress), portOf(c.TLSAddress))
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// loopbackAddr is where this host reaches a listener on addr: an
// unspecified host becomes the loopback address of its family.
func loopbackAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !isUnspecified(host) {
		return addr
	}
	if strings.Contains(host, ":") {
		return net.JoinHostPort("::1", port)
	}
	return net.JoinHostPort("127.0.0.1", port)
}

func isUnspecified(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}
