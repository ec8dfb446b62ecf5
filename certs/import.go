package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"airgapcoder/internal/atomicfile"
)

// ImportResult says what Import did.
type ImportResult struct {
	// Added are the CAs newly added to the store, in input order.
	Added []*x509.Certificate
	// Duplicates are CAs that were already imported or appeared twice in the
	// input; they were skipped.
	Duplicates []*x509.Certificate
	// Warnings are notes about accepted CAs, such as one that expires within
	// RenewBefore.
	Warnings []string
}

// Import checks every certificate in files (PEM files or bundles of several
// certificates; a single DER certificate is accepted too) and adds the CA
// certificates to DIR/certs/imported/, then rebuilds trust.pem. A certificate
// must be a CA (basic constraints valid, IsCA, allowed to sign certificates),
// parse, and be inside its validity period. Any refused input fails the whole
// call before anything is written; the error names every problem.
func Import(dir string, files []string, opts Options) (ImportResult, error) {
	var res ImportResult
	if len(files) == 0 {
		return res, errors.New("certs: import: no files given")
	}
	now := opts.now()

	existing, err := readImported(dir)
	if err != nil {
		return res, fmt.Errorf("import: read the store: %w", err)
	}
	have := map[string]bool{}
	for _, c := range existing {
		have[fingerprint(c)] = true
	}

	var errs []error
	for _, file := range files {
		certs, err := readCertificates(file)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", file, err))
			continue
		}
		for i, c := range certs {
			where := file
			if len(certs) > 1 {
				where = fmt.Sprintf("%s: certificate %d of %d", file, i+1, len(certs))
			}
			warn, err := checkCA(c, now)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", where, c.Subject, err))
				continue
			}
			if warn != "" {
				res.Warnings = append(res.Warnings, fmt.Sprintf("%s (%s): %s", where, c.Subject, warn))
			}
			fp := fingerprint(c)
			if have[fp] {
				res.Duplicates = append(res.Duplicates, c)
				continue
			}
			have[fp] = true
			res.Added = append(res.Added, c)
		}
	}
	if len(errs) > 0 {
		return ImportResult{}, fmt.Errorf("certs: import refused, nothing changed: %w", problems(errs))
	}

	// Everything checked: build the new trust.pem in memory first, so a
	// broken system bundle or ca.pem stops us before any write.
	trust, err := buildTrust(dir, opts, res.Added)
	if err != nil {
		return ImportResult{}, fmt.Errorf("import: build trust store: %w", err)
	}
	idir := filepath.Join(CertsDir(dir), ImportedDir)
	if err := os.MkdirAll(idir, 0o755); err != nil {
		return ImportResult{}, fmt.Errorf("import: %w", err)
	}
	var written []string
	undo := func() {
		for _, p := range written {
			os.Remove(p)
		}
	}
	for _, c := range res.Added {
		p := filepath.Join(idir, fingerprint(c)+".pem")
		if err := atomicfile.Write(p, encodeCert(c, describe(c)), 0o644); err != nil {
			undo()
			return ImportResult{}, fmt.Errorf("import: %w", err)
		}
		written = append(written, p)
	}
	if err := writeTrust(dir, trust); err != nil {
		undo()
		return ImportResult{}, fmt.Errorf("import: write trust store: %w", err)
	}
	return res, nil
}

// problems is several errors shown on one line, separated by "; ".
type problems []error

func (p problems) Error() string {
	msgs := make([]string, len(p))
	for i, err := range p {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (p problems) Unwrap() []error { return p }

// readCertificates parses every block of a PEM file, or the file as one DER
// certificate. Blocks that are not certificates are refused, naming what they
// are.
func readCertificates(file string) ([]*x509.Certificate, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	n := 0
	rest := raw
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		n++
		switch {
		case strings.Contains(block.Type, "PRIVATE KEY"):
			return nil, fmt.Errorf("block %d is a private key (%s), not a certificate: import only CA certificates, and keep the key secret", n, block.Type)
		case block.Type == "TRUSTED CERTIFICATE":
			return nil, fmt.Errorf("block %d is an OpenSSL TRUSTED CERTIFICATE: convert it with `openssl x509 -in FILE -out ca.pem` first", n)
		case block.Type != "CERTIFICATE":
			return nil, fmt.Errorf("block %d is a %s, not a CERTIFICATE", n, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("block %d: not a valid certificate: %w", n, err)
		}
		certs = append(certs, c)
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return nil, fmt.Errorf("malformed PEM after block %d: a -----BEGIN line without a well-formed block", n)
	}
	if n > 0 {
		return certs, nil
	}
	if c, err := x509.ParseCertificate(raw); err == nil {
		return []*x509.Certificate{c}, nil
	}
	if _, err := x509.ParsePKCS8PrivateKey(raw); err == nil {
		return nil, errors.New("a DER private key, not a certificate: import only CA certificates, and keep the key secret")
	}
	return nil, errors.New("not a certificate: no PEM block (-----BEGIN CERTIFICATE-----) and not a DER certificate")
}

// checkCA refuses what is not a usable CA certificate at now, and returns a
// warning when it expires within RenewBefore.
func checkCA(c *x509.Certificate, now time.Time) (warning string, err error) {
	switch {
	case !c.BasicConstraintsValid || !c.IsCA:
		return "", errors.New("not a CA certificate (no CA basic constraint): this looks like a server or client certificate; import the CA that issued it")
	case c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0:
		return "", errors.New("a CA certificate whose key usage does not allow signing certificates")
	case now.Before(c.NotBefore):
		return "", fmt.Errorf("not valid before %s (check this host's clock)", c.NotBefore.UTC().Format(time.RFC3339))
	case now.After(c.NotAfter):
		return "", fmt.Errorf("expired on %s", c.NotAfter.UTC().Format(time.RFC3339))
	case c.NotAfter.Sub(now) < RenewBefore:
		return fmt.Sprintf("expires soon, on %s: get its successor from the site's PKI", c.NotAfter.UTC().Format(time.RFC3339)), nil
	}
	return "", nil
}
