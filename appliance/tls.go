package appliance

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"

	"airgapcoder/certs"
)

// localTransport reaches the appliance's own HTTPS listeners from this
// host: it trusts exactly trust.pem and verifies the certificate as
// serverName, the name clients use, whatever address it dials (loopback
// for a wildcard listener). So a site certificate that names only the
// public host passes too. No proxy: these are local connections.
func localTransport(trust *certs.Store, serverName string) *http.Transport {
	t := trust.Transport()
	t.Proxy = nil
	t.TLSClientConfig.ServerName = serverName
	return t
}

// checkAdvertisedNames refuses a serving certificate (a site's: the
// appliance widens its own) that does not cover a name the appliance
// advertises: the access URL's host and (but on a proxy) the registry's,
// which agents, the CLI and container engines verify.
func checkAdvertisedNames(cert *x509.Certificate, cfg Config) error {
	if cert == nil {
		return nil
	}
	var missing []string
	names := []string{cfg.AccessHost()}
	if !cfg.IsProxy() {
		names = append(names, cfg.AdvertisedHost(cfg.MirrorAddress)) // a proxy runs no mirror
	}
	for _, name := range dedupe(names) {
		if cert.VerifyHostname(name) != nil {
			missing = append(missing, name)
		}
	}
	// Subdomain apps: every app host must verify, which takes the
	// wildcard name in the certificate.
	if w, err := cfg.wildcard(); err == nil && !w.IsZero() && cert.VerifyHostname(w.SampleHost()) != nil {
		missing = append(missing, w.CertificateName()+" (wildcard-access-url "+w.String()+": subdomain apps)")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("the serving certificate certs/server.pem (%s, issued by %s) does not cover %s, which the appliance advertises: install a certificate that names it, or set access-url and hosts to names it covers (%s)",
		cert.Subject.CommonName, cert.Issuer.CommonName, strings.Join(missing, ", "), strings.Join(append(cert.DNSNames, ipStrings(cert)...), ", "))
}

func ipStrings(cert *x509.Certificate) []string {
	var out []string
	for _, ip := range cert.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}
