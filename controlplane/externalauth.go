package controlplane

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"airgapcoder/coderd/externalauth"
	"airgapcoder/internal/egress"
)

// ExternalAuthConfig is the deployment's external auth providers (issue
// 33; docs/external-auth.md), which become coderd.Options.ExternalAuth,
// and how the control plane reaches them: the HTTP client it builds for
// them (coderd.Options.ExternalAuthHTTPClient) trusts and dials exactly as
// the OIDC client does.
type ExternalAuthConfig struct {
	// Providers are the providers in order; none turns external auth off.
	Providers []ExternalAuthProvider
	// TrustFile is a PEM bundle of the CAs the providers' certificates may
	// chain to (the appliance's certs/trust.pem, system roots included);
	// empty means the system's roots.
	TrustFile string
	// Egress, when set, guards the connections to the providers; its allow
	// list must hold their hosts.
	Egress *egress.Guard
}

// ExternalAuthProvider is one provider, plus where its secret comes from.
type ExternalAuthProvider struct {
	externalauth.Config
	// ClientSecretFile holds the client secret (surrounding white space
	// trimmed); it is read at start and wins over ClientSecret.
	ClientSecretFile string
}

// ExternalAuthEnvPrefix starts the environment variables that configure
// the providers, as Coder's: CODER_EXTERNAL_AUTH_<n>_<FIELD>.
const ExternalAuthEnvPrefix = "CODER_EXTERNAL_AUTH_"

// externalAuthFields are the <FIELD>s of CODER_EXTERNAL_AUTH_<n>_<FIELD>,
// Coder's names (CLIENT_SECRET_FILE is ours, as --oidc-client-secret-file).
// Lists are separated by spaces, as Coder's.
var externalAuthFields = map[string]func(p *ExternalAuthProvider, v string) error{
	"ID":                 func(p *ExternalAuthProvider, v string) error { p.ID = v; return nil },
	"TYPE":               func(p *ExternalAuthProvider, v string) error { p.Type = v; return nil },
	"CLIENT_ID":          func(p *ExternalAuthProvider, v string) error { p.ClientID = v; return nil },
	"CLIENT_SECRET":      func(p *ExternalAuthProvider, v string) error { p.ClientSecret = v; return nil },
	"CLIENT_SECRET_FILE": func(p *ExternalAuthProvider, v string) error { p.ClientSecretFile = v; return nil },
	"AUTH_URL":           func(p *ExternalAuthProvider, v string) error { p.AuthURL = v; return nil },
	"TOKEN_URL":          func(p *ExternalAuthProvider, v string) error { p.TokenURL = v; return nil },
	"VALIDATE_URL":       func(p *ExternalAuthProvider, v string) error { p.ValidateURL = v; return nil },
	"REGEX":              func(p *ExternalAuthProvider, v string) error { p.Regex = v; return nil },
	"SCOPES":             func(p *ExternalAuthProvider, v string) error { p.Scopes = strings.Fields(v); return nil },
	"EXTRA_TOKEN_KEYS":   func(p *ExternalAuthProvider, v string) error { p.ExtraTokenKeys = strings.Fields(v); return nil },
	"DISPLAY_NAME":       func(p *ExternalAuthProvider, v string) error { p.DisplayName = v; return nil },
	"DISPLAY_ICON":       func(p *ExternalAuthProvider, v string) error { p.DisplayIcon = v; return nil },
	"NO_REFRESH": func(p *ExternalAuthProvider, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		p.NoRefresh = b
		return nil
	},
}

// externalAuthUnsupported are Coder's fields this product does not
// implement: accepted when empty or false (a configuration copied from
// Coder), refused otherwise rather than silently ignored.
var externalAuthUnsupported = map[string]string{
	"DEVICE_FLOW":           "the device flow is not supported: links use the authorization code flow through the access URL",
	"DEVICE_CODE_URL":       "the device flow is not supported: links use the authorization code flow through the access URL",
	"APP_INSTALL_URL":       "GitHub App installation links are not supported",
	"APP_INSTALLATIONS_URL": "GitHub App installations are not supported",
}

// ExternalAuthFromEnv reads the providers from environ (KEY=VALUE, as
// os.Environ; the process environment is the CLI's to pass, this package
// reads none): CODER_EXTERNAL_AUTH_<n>_<FIELD>, n = 0, 1, … in order. As
// Coder's, a number that skips one is an error rather than a silently
// dropped provider; unlike Coder's, so is an unknown field (a typo would
// otherwise leave a provider half configured). An error names the
// variable. Coder's old CODER_GITAUTH_<n>_* names are refused with the
// new name to use.
func ExternalAuthFromEnv(environ []string) ([]ExternalAuthProvider, error) {
	type setting struct{ name, field, value string }
	byIndex := map[int][]setting{}
	seen := map[string]bool{}
	maxIndex := -1
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if legacy, ok := strings.CutPrefix(name, "CODER_GITAUTH_"); ok {
			return nil, fmt.Errorf("%s: Coder's old git auth variables are not read; rename it to %s%s", name, ExternalAuthEnvPrefix, legacy)
		}
		rest, ok := strings.CutPrefix(name, ExternalAuthEnvPrefix)
		if !ok || seen[name] {
			continue // the first of duplicates wins, as os.Getenv's
		}
		seen[name] = true
		num, field, ok := strings.Cut(rest, "_")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 0 || strconv.Itoa(n) != num {
			return nil, fmt.Errorf("%s: want %s<n>_<FIELD> with n = 0, 1, …", name, ExternalAuthEnvPrefix)
		}
		if _, known := externalAuthFields[field]; !known {
			if why, ok := externalAuthUnsupported[field]; ok {
				if b, err := strconv.ParseBool(value); value == "" || err == nil && !b {
					continue
				}
				return nil, fmt.Errorf("%s: %s; remove it", name, why)
			}
			return nil, fmt.Errorf("%s: unknown field %s; known fields: %s", name, field, strings.Join(externalAuthFieldNames(), ", "))
		}
		byIndex[n] = append(byIndex[n], setting{name, field, value})
		maxIndex = max(maxIndex, n)
	}
	var out []ExternalAuthProvider
	for n := 0; n <= maxIndex; n++ {
		settings, ok := byIndex[n]
		if !ok {
			next := n + 1
			for byIndex[next] == nil {
				next++
			}
			slices.SortFunc(byIndex[next], func(a, b setting) int { return strings.Compare(a.name, b.name) })
			return nil, fmt.Errorf("%s: provider %d skips provider %d: number providers 0, 1, … without a gap", byIndex[next][0].name, next, n)
		}
		var p ExternalAuthProvider
		for _, s := range settings {
			if err := externalAuthFields[s.field](&p, s.value); err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// externalAuthFieldNames are the fields ExternalAuthFromEnv reads, sorted.
func externalAuthFieldNames() []string {
	names := make([]string, 0, len(externalAuthFields))
	for f := range externalAuthFields {
		names = append(names, f)
	}
	slices.Sort(names)
	return names
}

// ExternalAuthEnvName names provider i's field as its environment
// variable; it is the naming ValidateExternalAuth uses for coder server.
func ExternalAuthEnvName(i int, field string) string {
	return fmt.Sprintf("%s%d_%s", ExternalAuthEnvPrefix, i, field)
}

// validProviderID is what coderd's externalauth.New accepts as an ID:
// it is part of URLs.
var validProviderID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidateExternalAuth checks, without reaching the providers, what
// coderd would refuse at start, each provider with its type's defaults
// (externalauth.Defaults) applied: an ID (or a Type, its default) that is
// URL-safe and unique, a client ID, auth and token URLs (set or derived by
// the type) that are absolute http(s) URLs, a validate URL likewise when
// there is one, and a regex that compiles. name(i, FIELD) is how an error
// names provider i's field (FIELD as in CODER_EXTERNAL_AUTH_<n>_<FIELD>):
// ExternalAuthEnvName for coder server, appliance.yaml's keys for the
// appliance. It reads no file.
func ValidateExternalAuth(providers []ExternalAuthProvider, name func(i int, field string) string) error {
	var errs []error
	ids := map[string]int{}
	for i, raw := range providers {
		p := externalauth.Defaults(raw.Config)
		if p.ID == "" {
			errs = append(errs, fmt.Errorf("%s: set the provider's type (gitea, gitlab, github, bitbucket-server, azure-devops, or a name of your own for a generic OAuth2 provider) or its id", name(i, "TYPE")))
			continue
		}
		idField := "ID"
		if raw.ID == "" {
			idField = "TYPE"
		}
		if !validProviderID.MatchString(p.ID) {
			errs = append(errs, fmt.Errorf("%s: %q is not a valid provider id (letters, digits, '.', '_' and '-': it is part of the callback URL)", name(i, idField), p.ID))
		}
		if j, dup := ids[p.ID]; dup {
			errs = append(errs, fmt.Errorf("%s: provider id %q is already provider %d's; give each provider its own id", name(i, "ID"), p.ID, j))
		}
		ids[p.ID] = i
		if p.ClientID == "" {
			errs = append(errs, fmt.Errorf("%s: provider %q has no client id: set the one the Git server registered for this deployment", name(i, "CLIENT_ID"), p.ID))
		}
		for _, u := range []struct{ field, value string }{{"AUTH_URL", p.AuthURL}, {"TOKEN_URL", p.TokenURL}, {"VALIDATE_URL", p.ValidateURL}} {
			switch parsed, err := url.Parse(u.value); {
			case u.value == "" && u.field == "VALIDATE_URL":
			case u.value == "":
				errs = append(errs, fmt.Errorf("%s: provider %q of type %q needs it (no default derives it)", name(i, u.field), p.ID, p.Type))
			case err != nil || (parsed.Scheme != "https" && parsed.Scheme != "http") || parsed.Host == "":
				errs = append(errs, fmt.Errorf("%s: %q is not an absolute http(s) URL", name(i, u.field), u.value))
			}
		}
		if _, err := regexp.Compile(p.Regex); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name(i, "REGEX"), err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// What coderd checks that the above does not is refused here, not at
	// the start of the API.
	configs := make([]externalauth.Config, len(providers))
	for i, p := range providers {
		configs[i] = p.Config
	}
	if _, err := externalauth.New(configs, externalauth.Options{AccessURL: &url.URL{Scheme: "https", Host: "coder.invalid"}}); err != nil {
		return err
	}
	return nil
}

// Hosts are the host names (lower case, no port) of the URLs the
// providers name: what the egress guard must allow. URLs left to a type's
// defaults are not included: naming a host allows it, a default does not.
func (c ExternalAuthConfig) Hosts() []string {
	var hosts []string
	for _, p := range c.Providers {
		for _, raw := range []string{p.AuthURL, p.TokenURL, p.ValidateURL} {
			if u, err := url.Parse(raw); err == nil && u.Hostname() != "" {
				if h := strings.ToLower(u.Hostname()); !slices.Contains(hosts, h) {
					hosts = append(hosts, h)
				}
			}
		}
	}
	return hosts
}

// check validates the providers as coder server names them, in one line
// (New calls it; it reads no file).
func (c ExternalAuthConfig) check() error {
	if err := ValidateExternalAuth(c.Providers, ExternalAuthEnvName); err != nil {
		return errors.New(strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return nil
}

// coderd returns the API's providers, each secret read from its file, and
// the HTTP client that reaches them (nil without providers): it trusts
// TrustFile and dials through Egress, as the OIDC client does.
func (c ExternalAuthConfig) coderd() ([]externalauth.Config, *http.Client, error) {
	if len(c.Providers) == 0 {
		return nil, nil, nil
	}
	out := make([]externalauth.Config, 0, len(c.Providers))
	for _, p := range c.Providers {
		cfg := p.Config
		if p.ClientSecretFile != "" {
			id := cmp.Or(p.ID, p.Type)
			b, err := os.ReadFile(p.ClientSecretFile)
			if err != nil {
				return nil, nil, fmt.Errorf("external auth provider %q: client secret file: %w", id, err)
			}
			if cfg.ClientSecret = strings.TrimSpace(string(b)); cfg.ClientSecret == "" {
				return nil, nil, fmt.Errorf("external auth provider %q: client secret file %s is empty", id, p.ClientSecretFile)
			}
		}
		out = append(out, cfg)
	}
	client, err := providerHTTPClient("external auth", c.TrustFile, c.Egress)
	if err != nil {
		return nil, nil, err
	}
	return out, client, nil
}
