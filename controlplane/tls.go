package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
	"time"

	"airgapcoder/certs"
)

// loadCertificate reads the HTTPS certificate (chain) and its key. Every
// error names the file at fault: a missing or unreadable file, one without
// PEM blocks of the right kind, a key that does not belong to the
// certificate, a certificate outside its validity period.
func loadCertificate(certFile, keyFile string, now time.Time) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("read certificate file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("read key file: %w", err)
	}
	var leaf *x509.Certificate
	for _, der := range certs.CertificateBlocks(certPEM) {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("certificate file %s: parse certificate: %w", certFile, err)
		}
		if leaf == nil {
			leaf = c
		}
	}
	if leaf == nil {
		return tls.Certificate{}, fmt.Errorf("certificate file %s holds no PEM certificate", certFile)
	}
	if !hasPrivateKeyBlock(keyPEM) {
		return tls.Certificate{}, fmt.Errorf("key file %s holds no PEM private key", keyFile)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return tls.Certificate{}, fmt.Errorf("key file %s does not belong to the certificate in %s", keyFile, certFile)
		}
		return tls.Certificate{}, fmt.Errorf("key file %s: %w", keyFile, err)
	}
	switch {
	case now.After(leaf.NotAfter):
		return tls.Certificate{}, fmt.Errorf("certificate file %s: the certificate expired on %s: install a renewed one", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return tls.Certificate{}, fmt.Errorf("certificate file %s: the certificate is not valid before %s: check this host's clock", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
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
