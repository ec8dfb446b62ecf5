// Package testpki makes the certificates of tests that run real servers
// over HTTPS on loopback: a fresh CA and a serving certificate it signed for
// 127.0.0.1, ::1 and localhost. Package certs makes them, as the appliance
// makes its own, so the CA is trusted only where a test hands it over (as
// `coder certs import` hands a site's CA to the appliance); a client left
// without it fails with Go's "x509: certificate signed by unknown
// authority".
//
// SelfSigned makes the other kind: one certificate that signs itself, for
// the names and the validity window a test chooses (an expired one, one
// for another host), for tests of what a server or a check does with the
// certificate it is handed.
//
// It is for tests only and holds no state: every New is a new CA.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

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

// SelfSigned returns a certificate for names (IP addresses or DNS names;
// the first is also its common name), valid from notBefore to notAfter,
// that signs itself, with its ECDSA P-256 key and its Leaf set. It is a
// CA as well as a serving certificate, so that a client can trust it
// alone.
func SelfSigned(t testing.TB, notBefore, notAfter time.Time, names ...string) *tls.Certificate {
	t.Helper()
	if len(names) == 0 {
		t.Fatal("testpki: SelfSigned needs at least one name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testpki: generate key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testpki: create certificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testpki: parse certificate: %v", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}
