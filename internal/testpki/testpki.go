// Package testpki makes the certificates of tests that run real servers
// over HTTPS on loopback: a fresh CA and a serving certificate it signed for
// 127.0.0.1, ::1 and localhost. Package certs makes them, as the appliance
// makes its own, so the CA is trusted only where a test hands it over (as
// `coder certs import` hands a site's CA to the appliance); a client left
// without it fails with Go's "x509: certificate signed by unknown
// authority".
//
// It is for tests only and holds no state: every New is a new CA.
package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"airgapcoder/certs"
)

// PKI is a CA and the loopback serving certificate it signed, as files
// under one folder and loaded.
type PKI struct {
	// CAFile is the PEM file of the CA certificate.
	CAFile string
	// CertFile and KeyFile are the PEM files of the serving certificate
	// and its key.
	CertFile string
	KeyFile  string
	// Cert is the serving certificate, loaded, for a tls.Config.
	Cert tls.Certificate

	pool *x509.CertPool
}

// New generates a CA and a serving certificate for loopback under dir
// (in certs.CertsDir(dir)).
func New(dir string) (*PKI, error) {
	if _, err := certs.Generate(dir, []string{"127.0.0.1", "::1", "localhost"}, certs.Options{}); err != nil {
		return nil, fmt.Errorf("testpki: generate: %w", err)
	}
	cert, err := certs.LoadServerCertificate(dir)
	if err != nil {
		return nil, fmt.Errorf("testpki: load serving certificate: %w", err)
	}
	cdir := certs.CertsDir(dir)
	p := &PKI{
		CAFile:   filepath.Join(cdir, certs.CAFile),
		CertFile: filepath.Join(cdir, certs.ServerFile),
		KeyFile:  filepath.Join(cdir, certs.ServerKeyFile),
		Cert:     cert,
		pool:     x509.NewCertPool(),
	}
	caPEM, err := os.ReadFile(p.CAFile)
	if err != nil {
		return nil, fmt.Errorf("testpki: read CA: %w", err)
	}
	if !p.pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("testpki: no certificate in " + p.CAFile)
	}
	return p, nil
}

// CertPool returns a new pool holding only the CA.
func (p *PKI) CertPool() *x509.CertPool { return p.pool.Clone() }
