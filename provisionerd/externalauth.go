package provisionerd

import (
	"maps"
	"slices"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	"airgapcoder/codersdk"
)

// External auth (issue 33): a template declares the providers it needs
// with data "coder_external_auth" "<label>" { id = "<provider id>" }. An
// import reports them (externalAuthProviders) so that coderd can refuse a
// build whose owner has not linked a required one; a build receives the
// owner's tokens in AcquiredJob.ExternalAuthProviders and hands each to
// the provider as externalAuthEnv(id), which the data source reads into
// its access_token.

// externalAuthEnv is the variable the official provider's data
// "coder_external_auth" reads its access_token from
// (provider.ExternalAuthAccessTokenEnvironmentVariable).
func externalAuthEnv(id string) string { return "CODER_EXTERNAL_AUTH_ACCESS_TOKEN_" + id }

// externalAuthTokenEnv is the build's tokens as the provider reads them.
// An id that cannot be part of a variable name ("" or one holding "=" or
// NUL) is left out: no data source could ask for it.
func externalAuthTokenEnv(tokens []codersdk.ExternalAuthProviderToken) map[string]string {
	env := make(map[string]string, len(tokens))
	for _, t := range tokens {
		if t.ID == "" || strings.ContainsAny(t.ID, "=\x00") {
			continue
		}
		env[externalAuthEnv(t.ID)] = t.AccessToken
	}
	return env
}

// externalAuthProviders finds the data "coder_external_auth" sources in
// the modules of a plan (its prior state, where the data sources read
// while planning are, and its planned values, where those deferred to the
// apply are), child modules included, as Coder's provisioner does. A
// provider declared more than once is reported once, optional only if
// every declaration says optional = true. The result is sorted by id.
func externalAuthProviders(modules ...*tfjson.StateModule) []codersdk.TemplateVersionExternalAuthProvider {
	optional := map[string]bool{}
	var walk func(m *tfjson.StateModule)
	walk = func(m *tfjson.StateModule) {
		if m == nil {
			return
		}
		for _, r := range m.Resources {
			if r.Mode != tfjson.DataResourceMode || r.Type != "coder_external_auth" {
				continue
			}
			id := str(r.AttributeValues["id"])
			if id == "" {
				continue // unknown until the apply: nothing to report
			}
			opt := boolean(r.AttributeValues["optional"])
			if prev, seen := optional[id]; seen {
				opt = opt && prev
			}
			optional[id] = opt
		}
		for _, c := range m.ChildModules {
			walk(c)
		}
	}
	for _, m := range modules {
		walk(m)
	}
	var out []codersdk.TemplateVersionExternalAuthProvider
	for _, id := range slices.Sorted(maps.Keys(optional)) {
		out = append(out, codersdk.TemplateVersionExternalAuthProvider{ID: id, Optional: optional[id]})
	}
	return out
}
