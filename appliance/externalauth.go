package appliance

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"airgapcoder/coderd/externalauth"
	"airgapcoder/controlplane"
	"airgapcoder/internal/egress"
)

// ExternalAuthProvider is one entry of appliance.yaml's external-auth list
// (docs/external-auth.md): Coder's CODER_EXTERNAL_AUTH_<n>_<FIELD>
// settings with kebab-case keys. The hosts of the three URLs are added to
// egress-allow by themselves, as the OIDC issuer's: naming the Git server
// is allowing it.
type ExternalAuthProvider struct {
	// ID names the provider in its callback URL
	// (<access-url>/external-auth/<id>/callback), templates and the CLI
	// (id; default: type).
	ID string `koanf:"id" yaml:"id,omitempty"`
	// Type is gitea, gitlab, github, bitbucket-server, azure-devops, or a
	// name of your own for a generic OAuth2 provider (type).
	Type string `koanf:"type" yaml:"type,omitempty"`
	// ClientID is the OAuth2 application the Git server registered for
	// this appliance (client-id).
	ClientID string `koanf:"client-id" yaml:"client-id,omitempty"`
	// ClientSecret, or better ClientSecretFile (a file only root and the
	// service user read; it wins), is the application's secret.
	ClientSecret     string `koanf:"client-secret" yaml:"client-secret,omitempty"`
	ClientSecretFile string `koanf:"client-secret-file" yaml:"client-secret-file,omitempty"`
	// AuthURL, TokenURL and ValidateURL are the Git server's authorize,
	// token and "who am I" endpoints (auth-url, token-url, validate-url).
	// For gitea, gitlab, github and bitbucket-server the last two derive
	// from auth-url's host; a URL left to a default on a public service
	// (gitlab.com, …) is refused: the appliance does not reach it.
	AuthURL     string `koanf:"auth-url" yaml:"auth-url,omitempty"`
	TokenURL    string `koanf:"token-url" yaml:"token-url,omitempty"`
	ValidateURL string `koanf:"validate-url" yaml:"validate-url,omitempty"`
	// Regex matches the Git remote URLs the tokens are for (regex).
	Regex string `koanf:"regex" yaml:"regex,omitempty"`
	// Scopes requested; empty means the type's defaults (scopes).
	Scopes []string `koanf:"scopes" yaml:"scopes,omitempty"`
	// DisplayName and DisplayIcon are what the dashboard shows
	// (display-name, display-icon).
	DisplayName string `koanf:"display-name" yaml:"display-name,omitempty"`
	DisplayIcon string `koanf:"display-icon" yaml:"display-icon,omitempty"`
	// NoRefresh: the server's tokens do not expire or are not refreshed
	// (no-refresh).
	NoRefresh bool `koanf:"no-refresh" yaml:"no-refresh,omitempty"`
	// ExtraTokenKeys are token response fields kept with the token
	// (extra-token-keys).
	ExtraTokenKeys []string `koanf:"extra-token-keys" yaml:"extra-token-keys,omitempty"`
}

// externalAuthKeys are the keys of an external-auth entry.
var externalAuthKeys = func() []string {
	var keys []string
	t := reflect.TypeFor[ExternalAuthProvider]()
	for i := range t.NumField() {
		keys = append(keys, t.Field(i).Tag.Get("koanf"))
	}
	return keys
}()

// checkExternalAuthKeys refuses an external-auth that is not a list of
// maps, and keys an entry does not know (decoding alone would ignore a
// misspelt key and leave the provider half configured). raw is the value
// as the YAML parser gave it; nil means the key is absent.
func checkExternalAuthKeys(raw any) error {
	if raw == nil {
		return nil
	}
	list, ok := raw.([]any)
	if !ok {
		return errors.New("external-auth: want a list of providers (- id: …, type: …, client-id: …)")
	}
	var errs []error
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			errs = append(errs, fmt.Errorf("external-auth[%d]: want a map of %s", i, strings.Join(externalAuthKeys, ", ")))
			continue
		}
		var unknown []string
		for k := range m {
			if !slices.Contains(externalAuthKeys, k) {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			errs = append(errs, fmt.Errorf("external-auth[%d]: unknown key(s) %s; known keys: %s", i, strings.Join(unknown, ", "), strings.Join(externalAuthKeys, ", ")))
		}
	}
	return errors.Join(errs...)
}

// externalAuthKey names entry i's field (a CODER_EXTERNAL_AUTH_<n>_<FIELD>
// field name) as appliance.yaml does.
func externalAuthKey(i int, field string) string {
	return fmt.Sprintf("external-auth[%d].%s", i, strings.ToLower(strings.ReplaceAll(field, "_", "-")))
}

// validateExternalAuth checks the external-auth list as coder server
// checks its variables, and more: the URLs named must be https, and a URL
// left to the type's default must be on a host the appliance may reach
// (one the provider names, or egress-allow): the defaults of gitlab,
// github, gitea and azure-devops without an auth-url are public services.
func (c Config) validateExternalAuth() error {
	cp := c.externalAuth("", nil)
	errs := []error{controlplane.ValidateExternalAuth(cp.Providers, externalAuthKey)}
	allowed, err := egress.New(c.EgressAllow, nil)
	if err != nil {
		return nil // Validate reports egress-allow itself
	}
	for i, p := range cp.Providers {
		named := (controlplane.ExternalAuthConfig{Providers: cp.Providers[i : i+1]}).Hosts()
		d := externalauth.Defaults(p.Config)
	urls:
		for _, u := range []struct{ field, set, value string }{
			{"AUTH_URL", p.AuthURL, d.AuthURL}, {"TOKEN_URL", p.TokenURL, d.TokenURL}, {"VALIDATE_URL", p.ValidateURL, d.ValidateURL},
		} {
			parsed, err := url.Parse(u.value)
			switch {
			case u.value == "" || err != nil || parsed.Host == "":
				// ValidateExternalAuth says what is wrong
			case u.set != "" && parsed.Scheme != "https":
				errs = append(errs, fmt.Errorf("%s %q: want an https URL", externalAuthKey(i, u.field), u.value))
			case u.set == "" && !slices.Contains(named, strings.ToLower(parsed.Hostname())) && !allowed.Allowed(parsed.Hostname()):
				hint := "set it to your server's endpoint"
				if u.field == "AUTH_URL" {
					hint = "set it to your Git server's; the other URLs of the type derive from it"
				}
				errs = append(errs, fmt.Errorf("%s is not set, and type %q defaults it to %s, which the appliance does not reach: %s (docs/external-auth.md)",
					externalAuthKey(i, u.field), d.Type, u.value, hint))
				if u.field == "AUTH_URL" {
					break urls // the others follow from auth-url
				}
			}
		}
	}
	return errors.Join(errs...)
}

// externalAuth is the control plane's external auth configuration: the
// providers are reached through guard and trusted through trustFile
// (certs/trust.pem), as the OIDC provider is.
func (c Config) externalAuth(trustFile string, guard *egress.Guard) controlplane.ExternalAuthConfig {
	out := controlplane.ExternalAuthConfig{TrustFile: trustFile, Egress: guard}
	for _, p := range c.ExternalAuth {
		out.Providers = append(out.Providers, controlplane.ExternalAuthProvider{
			Config: externalauth.Config{
				ID: p.ID, Type: p.Type, ClientID: p.ClientID, ClientSecret: p.ClientSecret,
				AuthURL: p.AuthURL, TokenURL: p.TokenURL, ValidateURL: p.ValidateURL, Regex: p.Regex,
				Scopes: p.Scopes, DisplayName: p.DisplayName, DisplayIcon: p.DisplayIcon,
				NoRefresh: p.NoRefresh, ExtraTokenKeys: p.ExtraTokenKeys,
			},
			ClientSecretFile: p.ClientSecretFile,
		})
	}
	return out
}
