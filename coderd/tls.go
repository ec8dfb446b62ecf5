package coderd

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// loadCertificate reads the HTTPS certificate (chain) and its key. Every
// error names the file at fault: a missing or unreadable file, one without
// PEM blocks of the right kind, a key that does not belong to the
// certificate, a certificate outside its validity period.
func loadCertificate(certFile, keyFile string, now time.Time) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("read TLS certificate file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("read TLS key file: %w", err)
	}
	var leaf *x509.Certificate
	for rest := certPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("TLS certificate file %s: parse certificate: %w", certFile, err)
		}
		if leaf == nil {
			leaf = c
		}
	}
	if leaf == nil {
		return tls.Certificate{}, fmt.Errorf("TLS certificate file %s holds no PEM certificate", certFile)
	}
	if !hasPrivateKeyBlock(keyPEM) {
		return tls.Certificate{}, fmt.Errorf("TLS key file %s holds no PEM private key", keyFile)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return tls.Certificate{}, fmt.Errorf("TLS key file %s does not belong to the certificate in %s", keyFile, certFile)
		}
		return tls.Certificate{}, fmt.Errorf("TLS key file %s: %w", keyFile, err)
	}
	switch {
	case now.After(leaf.NotAfter):
		return tls.Certificate{}, fmt.Errorf("TLS certificate file %s: the certificate expired on %s: install a renewed one", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return tls.Certificate{}, fmt.Errorf("TLS certificate file %s: the certificate is not valid before %s: check this host's clock", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return cert, nil
}

func hasPrivateKeyBlock(data []byte) bool {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return false
		}
		if strings.HasSuffix(block.Type, "PRIVATE KEY") {
			return true
		}
	}
}

// redirectToHTTPS answers every plain HTTP request with a permanent redirect
// (308, which keeps the method and body) to the same path and query under
// target, the https access URL. /healthz is the exception: load balancers
// and scripts probe it on either listener.
func redirectToHTTPS(target *url.URL, health http.Handler) http.Handler {
	base := strings.TrimSuffix(target.String(), "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			health.ServeHTTP(w, r)
			return
		}
		http.Redirect(w, r, base+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}

// strictTransportSecurity adds the Strict-Transport-Security header to
// every response: browsers then use only HTTPS for this host and refuse to
// let a user click through a certificate warning.
func strictTransportSecurity(maxAge int, next http.Handler) http.Handler {
	value := "max-age=" + strconv.Itoa(maxAge)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", value)
		next.ServeHTTP(w, r)
	})
}

// advertisedAddr is addr with an unspecified host (0.0.0.0, ::) replaced
// by host: a listener on every interface is reached by a name, never by
// the wildcard.
func advertisedAddr(addr net.Addr, host string) string {
	h, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		h = host
	}
	return net.JoinHostPort(h, port)
}
