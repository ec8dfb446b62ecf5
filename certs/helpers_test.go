package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCert is a certificate made by a test, with its key.
type testCert struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func (c testCert) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})
}

func (c testCert) keyPEM(t testing.TB) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

type certSpec struct {
	cn         string
	ca         bool
	notBefore  time.Time
	notAfter   time.Time
	dnsNames   []string
	parent     *testCert // nil: self-signed
	noCertSign bool
}

var serial int64

func makeCert(t testing.TB, s certSpec) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if s.notBefore.IsZero() {
		s.notBefore = time.Now().Add(-time.Hour)
	}
	if s.notAfter.IsZero() {
		s.notAfter = time.Now().Add(365 * 24 * time.Hour)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: s.cn},
		NotBefore:    s.notBefore,
		NotAfter:     s.notAfter,
		DNSNames:     s.dnsNames,
	}
	if s.ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
		if s.noCertSign {
			tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		}
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	parent, signer := tmpl, key
	if s.parent != nil {
		parent, signer = s.parent.cert, s.parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCert{cert: c, key: key}
}

func writeTemp(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeSystem writes a system bundle with one root and returns options that
// use it, so that tests do not depend on the machine's bundle.
func fakeSystem(t testing.TB) (Options, testCert) {
	t.Helper()
	root := makeCert(t, certSpec{cn: "Fake System Root", ca: true})
	return Options{SystemBundle: writeTemp(t, "system.pem", root.pem())}, root
}
