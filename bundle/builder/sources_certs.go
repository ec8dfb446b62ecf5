package builder

import (
	"airgapcoder/bundle"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"time"
)

// stageCerts checks every certs: file and puts its certificates, re-encoded
// as plain PEM, at certs/<name>.pem. Each file must hold only certificates,
// at least one, each of them a CA (basic constraints say so) that is valid
// now. A certificate expiring within 30 days is reported.
func (b *builder) stageCerts(ctx context.Context) error {
	now := time.Now()
	for _, src := range b.cfg.Certs {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := os.ReadFile(src.Path)
		if err != nil {
			return fmt.Errorf("%s: %w", src.Origin, err)
		}
		certs, err := parseCACerts(data, now)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", src.Origin, src.Path, err)
		}
		var out bytes.Buffer
		notAfter := certs[0].NotAfter
		for _, c := range certs {
			pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
			if c.NotAfter.Before(notAfter) {
				notAfter = c.NotAfter
			}
			if c.NotAfter.Sub(now) < 30*24*time.Hour {
				b.progress.logf("%s: %s: certificate %q expires on %s", src.Origin, src.Path, c.Subject, c.NotAfter.Format(time.DateOnly))
			}
		}
		rel := bundle.CertPath(src.Name)
		if err := b.writePayload(rel, out.Bytes()); err != nil {
			return fmt.Errorf("%s: %w", src.Origin, err)
		}
		sum := sha256.Sum256(out.Bytes())
		b.mu.Lock()
		b.comp.Certs = append(b.comp.Certs, bundle.Cert{Path: rel, Subject: certs[0].Subject.String(), NotAfter: notAfter.UTC(), SHA256: hex.EncodeToString(sum[:])})
		b.mu.Unlock()
		b.progress.logf("certificate %s (%s)", src.Name, certs[0].Subject)
	}
	return nil
}

// parseCACerts returns the certificates of a PEM file, checking that it
// holds nothing else and that each is a CA valid at now.
func parseCACerts(data []byte, now time.Time) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a %s block; a certs file holds CA certificates only", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		switch {
		case !c.BasicConstraintsValid || !c.IsCA:
			return nil, fmt.Errorf("certificate %q is not a CA certificate (its basic constraints do not say CA:TRUE)", c.Subject)
		case now.After(c.NotAfter):
			return nil, fmt.Errorf("certificate %q expired on %s", c.Subject, c.NotAfter.Format(time.RFC3339))
		case now.Before(c.NotBefore):
			return nil, fmt.Errorf("certificate %q is not valid before %s", c.Subject, c.NotBefore.Format(time.RFC3339))
		}
		certs = append(certs, c)
	}
	if len(bytes.TrimSpace(rest)) > 0 && len(certs) == 0 {
		return nil, fmt.Errorf("is not a PEM file")
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("holds no certificate")
	}
	return certs, nil
}
