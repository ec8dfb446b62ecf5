package certs

import (
	"fmt"
	"path/filepath"
	"time"
)

// Certificate roles in a List.
const (
	RoleApplianceCA = "appliance CA"
	RoleImportedCA  = "imported CA"
	RoleServer      = "serving certificate"
)

// Info describes one certificate of the appliance's trust store or its
// serving certificate, for people (the dashboard's Appliance page).
type Info struct {
	Role     string
	Subject  string
	Issuer   string
	NotAfter time.Time
	// SHA256 is the certificate's fingerprint (hex of the DER's sha256).
	SHA256 string
}

// List returns the appliance CA (when there is one), every imported CA and
// the serving certificate, in that order. The system roots that trust.pem
// also holds are not listed: they come with the host.
func List(dir string) ([]Info, error) {
	var out []Info
	if ca := firstCertificate(filepath.Join(CertsDir(dir), CAFile)); ca != nil {
		out = append(out, Info{Role: RoleApplianceCA, Subject: ca.Subject.String(), Issuer: ca.Issuer.String(), NotAfter: ca.NotAfter, SHA256: fingerprint(ca)})
	}
	imported, err := readImported(dir)
	if err != nil {
		return nil, fmt.Errorf("list certificates: %w", err)
	}
	for _, c := range imported {
		out = append(out, Info{Role: RoleImportedCA, Subject: c.Subject.String(), Issuer: c.Issuer.String(), NotAfter: c.NotAfter, SHA256: fingerprint(c)})
	}
	if s := firstCertificate(filepath.Join(CertsDir(dir), ServerFile)); s != nil {
		out = append(out, Info{Role: RoleServer, Subject: s.Subject.String(), Issuer: s.Issuer.String(), NotAfter: s.NotAfter, SHA256: fingerprint(s)})
	}
	return out, nil
}
