package wsproxy

import (
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	"airgapcoder/codersdk"
)

// certificateWarnBefore is how long before its expiry the serving
// certificate is reported (a warning; expired is an error).
const certificateWarnBefore = 30 * 24 * time.Hour

// healthReport is the proxy's own view of its health, served at
// /healthz-report and sent with every registration. Errors make the
// primary count the proxy unhealthy: a certificate users' clients would
// refuse (expired, or not covering the access URL's host), or the relay
// session to the primary down after registration (connections through the
// proxy would fail). Warnings do not: a certificate expiring soon, one that
// does not cover the wildcard's hosts, plain HTTP.
func (s *Server) healthReport() codersdk.ProxyHealthReport {
	report := codersdk.ProxyHealthReport{Errors: []string{}, Warnings: []string{}}
	if _, registered := s.registration(); registered && s.session() == nil {
		report.Errors = append(report.Errors, "the relay session to the primary is down (re-dialing): connections through this proxy fail; clients use the primary")
	}
	if s.opts.TLSCertificate == nil {
		report.Warnings = append(report.Warnings, fmt.Sprintf("serving plain HTTP at %s: give the proxy a TLS certificate", s.opts.AccessURL))
		return report
	}
	leaf := s.opts.TLSCertificate.Leaf
	if leaf == nil && len(s.opts.TLSCertificate.Certificate) > 0 {
		var err error
		if leaf, err = x509.ParseCertificate(s.opts.TLSCertificate.Certificate[0]); err != nil {
			report.Errors = append(report.Errors, fmt.Sprintf("parse the serving certificate: %v", err))
			return report
		}
	}
	if leaf == nil {
		report.Errors = append(report.Errors, "the serving certificate is empty")
		return report
	}
	now := s.clock.Now()
	switch {
	case now.After(leaf.NotAfter):
		report.Errors = append(report.Errors, fmt.Sprintf("the serving certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339)))
	case now.Before(leaf.NotBefore):
		report.Errors = append(report.Errors, fmt.Sprintf("the serving certificate is not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339)))
	case leaf.NotAfter.Sub(now) < certificateWarnBefore:
		report.Warnings = append(report.Warnings, fmt.Sprintf("the serving certificate expires at %s", leaf.NotAfter.UTC().Format(time.RFC3339)))
	}
	if err := leaf.VerifyHostname(s.opts.AccessURL.Hostname()); err != nil {
		report.Errors = append(report.Errors, fmt.Sprintf("the serving certificate does not cover the access URL's host %s: %v", s.opts.AccessURL.Hostname(), err))
	}
	if w := s.opts.WildcardAccessURL; w != "" {
		sample := "app" + strings.TrimPrefix(strings.Split(w, ":")[0], "*")
		if err := leaf.VerifyHostname(sample); err != nil {
			report.Warnings = append(report.Warnings, fmt.Sprintf("the serving certificate does not cover the wildcard's hosts (e.g. %s): %v", sample, err))
		}
	}
	return report
}
