// Package appurl names subdomain apps: the wildcard access URL
// (--wildcard-access-url) and the app hosts under it, in Coder's grammar,
// so that Coder's documentation and habits apply:
//
//	<slug>--<agent>--<workspace>--<owner>.<suffix>     a coder_app
//	<slug>--<workspace>--<owner>.<suffix>              a coder_app of any agent
//	<port>[s]--<agent>--<workspace>--<owner>.<suffix>  a TCP port (4 or 5 digits; "s": the workspace serves https)
//
// optionally behind a prefix that ends in three hyphens
// ("anything---<slug>--…"), which the app may use to have several origins.
// Names are Coder's: letters and digits in hyphen-separated runs, so "--"
// never occurs inside one. The wildcard is "*.apps.example.internal" (the
// suffix is the domain) or "*-apps.example.internal" (the wildcard is part
// of the first label), optionally with a port.
//
// It only parses and formats names; it must not resolve them or touch the
// network. It imports the standard library only.
package appurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

var (
	nameRe  = `[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*`
	hostRe  = regexp.MustCompile(`^(` + nameRe + `)(?:--(` + nameRe + `))?--(` + nameRe + `)--(` + nameRe + `)$`)
	portRe  = regexp.MustCompile(`^[0-9]{4,5}s?$`)
	labelRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// NameRe matches a name that can be part of an app host (an app
	// slug, agent, workspace or owner name).
	NameRe = regexp.MustCompile(`^` + nameRe + `$`)
)

// Wildcard is a parsed wildcard access URL.
type Wildcard struct {
	// labelSuffix follows the "*" in the first label ("" for "*.x.y",
	// "-apps" for "*-apps.x.y"); domain is the rest after the first dot,
	// lower case; port is "" unless the wildcard names one.
	labelSuffix, domain, port string
	raw                       string
}

// ParseWildcard parses a wildcard access URL such as
// "*.apps.example.internal" or "*-apps.example.internal:8443". A scheme,
// a path, a "*" anywhere but at the start of the first label, or a single
// label is refused.
func ParseWildcard(s string) (Wildcard, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "://") {
		return Wildcard{}, fmt.Errorf("wildcard access URL %q: give a host name pattern without a scheme, e.g. *.apps.example.internal", s)
	}
	if strings.ContainsAny(s, "/?#@") {
		return Wildcard{}, fmt.Errorf("wildcard access URL %q: give a host name pattern only, e.g. *.apps.example.internal", s)
	}
	host, port := strings.ToLower(s), ""
	if h, p, err := net.SplitHostPort(host); err == nil {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return Wildcard{}, fmt.Errorf("wildcard access URL %q: bad port %q", s, p)
		}
		host, port = h, p
	}
	if !strings.HasPrefix(host, "*") || strings.Count(host, "*") != 1 {
		return Wildcard{}, fmt.Errorf("wildcard access URL %q must start with a single \"*\", e.g. *.apps.example.internal", s)
	}
	first, domain, ok := strings.Cut(host, ".")
	if !ok || domain == "" || strings.HasSuffix(domain, ".") {
		return Wildcard{}, fmt.Errorf("wildcard access URL %q needs a domain after the wildcard label, e.g. *.apps.example.internal", s)
	}
	labels := append([]string{"a" + strings.TrimPrefix(first, "*")}, strings.Split(domain, ".")...)
	for _, l := range labels {
		if !labelRe.MatchString(l) {
			return Wildcard{}, fmt.Errorf("wildcard access URL %q: %q is not a host name label", s, l)
		}
	}
	return Wildcard{labelSuffix: strings.TrimPrefix(first, "*"), domain: domain, port: port, raw: host}, nil
}

// String is the pattern as configured (lower case, without the port).
func (w Wildcard) String() string { return w.raw }

// IsZero reports an unset wildcard.
func (w Wildcard) IsZero() bool { return w.raw == "" }

// Port is the port the wildcard names, "" when it names none (app URLs
// then use the access URL's).
func (w Wildcard) Port() string { return w.port }

// Match returns the part of host (a request's Host, with or without a
// port) that the "*" stands for. The port is not compared: a request
// reaches the listener it reaches.
func (w Wildcard) Match(host string) (string, bool) {
	if w.IsZero() {
		return "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	first, domain, ok := strings.Cut(host, ".")
	if !ok || domain != w.domain {
		return "", false
	}
	sub, ok := strings.CutSuffix(first, w.labelSuffix)
	if !ok || sub == "" {
		return "", false
	}
	return sub, true
}

// Host is the host (with the port that app URLs use) of the app host sub,
// for a deployment reached at accessURL: the wildcard's port, else the
// access URL's (as Coder does).
func (w Wildcard) Host(sub string, accessURL *url.URL) string {
	h := sub + w.labelSuffix + "." + w.domain
	port := w.port
	if port == "" && accessURL != nil {
		port = accessURL.Port()
	}
	if port != "" {
		return net.JoinHostPort(h, port)
	}
	return h
}

// HostPattern is the wildcard with the port app URLs use, as Coder's GET
// /api/v2/applications/host answers it ("*.apps.example.internal:3443").
func (w Wildcard) HostPattern(accessURL *url.URL) string {
	if w.IsZero() {
		return ""
	}
	return w.Host("*", accessURL)
}

// CertificateName is the DNS name a serving certificate needs to cover
// every app host: the wildcard itself for "*.apps.x", the parent domain's
// wildcard for "*-apps.x" (a certificate's "*" is a whole label).
func (w Wildcard) CertificateName() string {
	return "*." + w.domain
}

// SampleHost is an app host under the wildcard, for checking that a
// certificate covers app hosts.
func (w Wildcard) SampleHost() string {
	return AppHost{SlugOrPort: "app", Agent: "main", Workspace: "ws", Owner: "owner"}.String() + w.labelSuffix + "." + w.domain
}

// AppHost is a parsed app host name (the part the wildcard stands for).
type AppHost struct {
	// Prefix is "" or the prefix with its trailing "---".
	Prefix string
	// SlugOrPort is an app slug, or a port of 4 or 5 digits with an
	// optional "s" (https).
	SlugOrPort string
	// Agent is "" when an app host omits it (ports never do).
	Agent, Workspace, Owner string
}

// ErrNotAppHost is returned for a name that is not an app host.
var ErrNotAppHost = errors.New("appurl: not an app host (want <slug>--<agent>--<workspace>--<owner> or <port>--<agent>--<workspace>--<owner>)")

// ParseAppHost parses the part of a host the wildcard stands for.
func ParseAppHost(sub string) (AppHost, error) {
	var h AppHost
	if i := strings.LastIndex(sub, "---"); i >= 0 {
		h.Prefix, sub = sub[:i+3], sub[i+3:]
	}
	m := hostRe.FindStringSubmatch(sub)
	if m == nil {
		return AppHost{}, ErrNotAppHost
	}
	h.SlugOrPort, h.Agent, h.Workspace, h.Owner = m[1], m[2], m[3], m[4]
	if h.IsPort() && h.Agent == "" {
		return AppHost{}, fmt.Errorf("%w: a port needs the agent's name", ErrNotAppHost)
	}
	return h, nil
}

// IsPort reports a port host.
func (h AppHost) IsPort() bool { return portRe.MatchString(h.SlugOrPort) }

// Port returns the port of a port host, and whether the workspace serves
// it over https (the "s" suffix).
func (h AppHost) Port() (port uint16, https bool, ok bool) {
	if !h.IsPort() {
		return 0, false, false
	}
	digits, https := strings.CutSuffix(h.SlugOrPort, "s")
	n, err := strconv.ParseUint(digits, 10, 16)
	if err != nil || n == 0 {
		return 0, false, false
	}
	return uint16(n), https, true
}

// String is the app host's name without the wildcard's suffix.
func (h AppHost) String() string {
	var b strings.Builder
	b.WriteString(h.Prefix)
	b.WriteString(h.SlugOrPort)
	if h.Agent != "" {
		b.WriteString("--" + h.Agent)
	}
	b.WriteString("--" + h.Workspace + "--" + h.Owner)
	return b.String()
}

// SubdomainName is the name of an app's host without the wildcard's
// suffix, as Coder's subdomain_name: "<slug>--<agent>--<workspace>--<owner>",
// lower case; "" when a name cannot be part of a host (Coder's names have
// no "--"; this deployment's may).
func SubdomainName(slugOrPort, agent, workspace, owner string) string {
	for _, n := range []string{slugOrPort, agent, workspace, owner} {
		if !NameRe.MatchString(n) {
			return ""
		}
	}
	return strings.ToLower(AppHost{SlugOrPort: slugOrPort, Agent: agent, Workspace: workspace, Owner: owner}.String())
}
