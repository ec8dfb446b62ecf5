package testidp

import (
	"crypto/tls"
	"path/filepath"

	"airgapcoder/certs"
)

// pki is a fresh CA and a serving certificate it signed for loopback
// (127.0.0.1, ::1 and localhost), made by package certs as the appliance
// makes its own: a CA the appliance trusts only when it is imported.
type pki struct {
	caFile   string // the CA certificate
	certFile string // the serving certificate
	keyFile  string // its key
	cert     tls.Certificate
}

// newPKI generates the CA and certificate under dir (certs.CertsDir(dir)).
func newPKI(dir string) (*pki, error) {
	if _, err := certs.Generate(dir, []string{"127.0.0.1", "::1", "localhost"}, certs.Options{}); err != nil {
		return nil, err
	}
	cert, err := certs.LoadServerCertificate(dir)
	if err != nil {
		return nil, err
	}
	cdir := certs.CertsDir(dir)
	return &pki{
		caFile:   filepath.Join(cdir, certs.CAFile),
		certFile: filepath.Join(cdir, certs.ServerFile),
		keyFile:  filepath.Join(cdir, certs.ServerKeyFile),
		cert:     cert,
	}, nil
}
