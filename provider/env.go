package provider

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strings"
)

// The environment variables the provisioner sets; see the package
// documentation.
const (
	EnvURL                   = "CODER_URL"
	EnvWorkspaceID           = "CODER_WORKSPACE_ID"
	EnvWorkspaceName         = "CODER_WORKSPACE_NAME"
	EnvWorkspaceOwner        = "CODER_WORKSPACE_OWNER"
	EnvWorkspaceOwnerID      = "CODER_WORKSPACE_OWNER_ID"
	EnvWorkspaceTransition   = "CODER_WORKSPACE_TRANSITION"
	EnvWorkspaceTemplateName = "CODER_WORKSPACE_TEMPLATE_NAME"
	EnvProvisionerOS         = "CODER_PROVISIONER_OS"
	EnvProvisionerArch       = "CODER_PROVISIONER_ARCH"
	EnvProvisionerTags       = "CODER_PROVISIONER_TAGS"
	EnvCACertFile            = "CODER_CA_CERT_FILE"
)

// DefaultURL is the access URL when neither the provider block nor CODER_URL
// gives one: where `make run` serves the control plane.
const DefaultURL = "http://127.0.0.1:3000"

const nilUUID = "00000000-0000-0000-0000-000000000000"

// buildEnv is the build context the provider reads once from its environment
// and configuration, and hands to every resource and data source.
type buildEnv struct {
	// URL is the deployment's access URL without a trailing slash.
	URL string
	// URLDefaulted is true when URL is DefaultURL because nothing set it.
	URLDefaulted bool

	WorkspaceID      string
	WorkspaceName    string
	WorkspaceOwner   string
	WorkspaceOwnerID string
	Transition       string // "start" or "stop"
	TemplateName     string
	ProvisionerOS    string
	ProvisionerArch  string
	ProvisionerTags  map[string]string // never nil
	CACertFile       string            // the path, "" when unset
	CAPEM            string            // the certificates of CACertFile re-encoded as PEM, "" when unset
}

// readEnv builds a buildEnv from lookup (os.LookupEnv outside tests) and the
// provider block's url, which overrides CODER_URL when not empty.
func readEnv(lookup func(string) (string, bool), configURL string) (*buildEnv, error) {
	get := func(name, def string) string {
		if v, ok := lookup(name); ok && v != "" {
			return v
		}
		return def
	}
	e := &buildEnv{
		WorkspaceID:      get(EnvWorkspaceID, nilUUID),
		WorkspaceName:    get(EnvWorkspaceName, "default"),
		WorkspaceOwner:   get(EnvWorkspaceOwner, "default"),
		WorkspaceOwnerID: get(EnvWorkspaceOwnerID, nilUUID),
		Transition:       get(EnvWorkspaceTransition, "start"),
		TemplateName:     get(EnvWorkspaceTemplateName, "default"),
		ProvisionerOS:    get(EnvProvisionerOS, runtime.GOOS),
		ProvisionerArch:  get(EnvProvisionerArch, runtime.GOARCH),
		ProvisionerTags:  map[string]string{},
		CACertFile:       get(EnvCACertFile, ""),
	}

	rawURL, source := configURL, "provider url"
	if rawURL == "" {
		rawURL, source = get(EnvURL, ""), EnvURL
	}
	if rawURL == "" {
		rawURL, e.URLDefaulted = DefaultURL, true
	}
	u, err := normalizeURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	e.URL = u

	if e.Transition != "start" && e.Transition != "stop" {
		return nil, fmt.Errorf("%s: got %q, want start or stop", EnvWorkspaceTransition, e.Transition)
	}
	if tags := get(EnvProvisionerTags, ""); tags != "" {
		if err := json.Unmarshal([]byte(tags), &e.ProvisionerTags); err != nil {
			return nil, fmt.Errorf("%s: want a JSON object of strings: %w", EnvProvisionerTags, err)
		}
		if e.ProvisionerTags == nil { // the JSON was null
			e.ProvisionerTags = map[string]string{}
		}
	}
	if e.CACertFile != "" {
		e.CAPEM, err = readCABundle(e.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvCACertFile, err)
		}
	}
	return e, nil
}

// normalizeURL checks that raw is an absolute http or https URL without
// query or fragment and returns it without a trailing slash.
func normalizeURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an absolute http or https URL", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("%q must not have a query, a fragment or user information", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// readCABundle reads a PEM file and returns its certificates re-encoded as
// PEM (comments and other blocks dropped, so the result is safe to embed in
// a here-document), after checking that each parses.
func readCABundle(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return "", fmt.Errorf("parse %s: %w", path, err)
		}
		n++
		pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes})
	}
	if n == 0 {
		return "", errors.New(path + " holds no PEM certificate")
	}
	return out.String(), nil
}
