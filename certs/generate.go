package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"airgapcoder/internal/atomicfile"
)

// Validity periods of what Generate creates.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 365 * 24 * time.Hour
)

// ErrInvalidHost is wrapped by the errors of Generate and EnsureServer for a
// host that is neither a DNS name nor an IP address.
var ErrInvalidHost = errors.New("invalid host")

// GenerateResult says what Generate or EnsureServer did.
type GenerateResult struct {
	// CACreated is true when a new appliance CA was written.
	CACreated bool
	// Issued is true when a new server certificate was written; Reason then
	// says why.
	Issued bool
	// Reason is why the server certificate was issued, or a note about a
	// certificate that was kept.
	Reason string
	// CA is the appliance CA, nil when EnsureServer kept a site's
	// certificate and there is no appliance CA.
	CA *x509.Certificate
	// Server is the serving certificate now in server.pem.
	Server *x509.Certificate
}

// Generate makes sure DIR/certs has the appliance CA (created when missing,
// expired or expiring within RenewBefore) and a server certificate signed by
// it for exactly hosts (DNS names and IP addresses), and rebuilds trust.pem
// so that it holds the CA. The server certificate is issued when it is
// missing, unreadable, expiring within RenewBefore, issued by another CA, or
// for another host list; otherwise the files stay as they are.
func Generate(dir string, hosts []string, opts Options) (GenerateResult, error) {
	res, err := generate(dir, hosts, opts, true)
	if err != nil {
		return res, fmt.Errorf("certs: generate: %w", err)
	}
	return res, nil
}

// EnsureServer makes sure there is a usable serving certificate, for a
// server about to start: a valid server.pem that another CA issued (the
// site's) is kept as it is; one issued by the appliance CA is renewed when
// it expires within RenewBefore or lacks one of hosts (the new one covers
// its old hosts and hosts); a missing one is generated with the appliance CA
// (created when missing). trust.pem is rebuilt when the CA is new or
// trust.pem is missing.
func EnsureServer(dir string, hosts []string, opts Options) (GenerateResult, error) {
	res, err := generate(dir, hosts, opts, false)
	if err != nil {
		return res, fmt.Errorf("certs: ensure server certificate: %w", err)
	}
	return res, nil
}

// LoadServerCertificate reads server.pem and server-key.pem for a TLS
// server.
func LoadServerCertificate(dir string) (tls.Certificate, error) {
	cdir := CertsDir(dir)
	c, err := tls.LoadX509KeyPair(filepath.Join(cdir, ServerFile), filepath.Join(cdir, ServerKeyFile))
	if err != nil {
		return c, fmt.Errorf("certs: load server certificate: %w", err)
	}
	return c, nil
}

func generate(dir string, hosts []string, opts Options, exact bool) (GenerateResult, error) {
	var res GenerateResult
	hosts, err := normalizeHosts(hosts)
	if err != nil {
		return res, err
	}
	if exact && len(hosts) == 0 {
		return res, errors.New("no hosts given for the server certificate")
	}
	now := opts.now()
	cdir := CertsDir(dir)
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		return res, err
	}

	current, currentErr := readServer(dir)
	ca, caKey, err := readCA(dir)
	if err != nil {
		return res, err
	}
	ours := ca != nil && current != nil && current.CheckSignatureFrom(ca) == nil
	if current == nil && !exact && !errors.Is(currentErr, fs.ErrNotExist) {
		// server.pem and its key exist but do not load: repair what we
		// issued (say, a write cut short), refuse to touch a site's files.
		leaf := firstCertificate(filepath.Join(cdir, ServerFile))
		if ca == nil || leaf == nil || leaf.CheckSignatureFrom(ca) != nil {
			return res, fmt.Errorf("%w: fix server.pem and server-key.pem, or remove both to generate a certificate", currentErr)
		}
	}

	if !exact && current != nil && !ours {
		// A certificate the site installed: use it as long as it is valid.
		if now.After(current.NotAfter) {
			return res, fmt.Errorf("%s expired on %s: replace it, or remove server.pem and server-key.pem to generate one",
				filepath.Join(cdir, ServerFile), current.NotAfter.UTC().Format(time.RFC3339))
		}
		res.CA, res.Server = ca, current
		if missing := uncovered(current, hosts); len(missing) > 0 {
			res.Reason = fmt.Sprintf("kept the site's certificate, which does not cover %s", strings.Join(missing, ", "))
		}
		return res, ensureTrust(dir, opts, false)
	}

	if ca == nil || ca.NotAfter.Sub(now) < RenewBefore {
		if ca, caKey, err = newCA(dir, now); err != nil {
			return res, err
		}
		res.CACreated = true
		ours = false
	}
	res.CA = ca

	want := hosts
	res.Reason = renewReason(current, currentErr, ours, hosts, exact, now)
	if !exact && current != nil && ours {
		// Renewing for a server: keep the names it already served.
		want, _ = normalizeHosts(append(certHosts(current), hosts...))
	}
	if res.Reason == "" {
		res.Server = current
		return res, ensureTrust(dir, opts, exact)
	}
	if len(want) == 0 {
		return res, errors.New("no hosts given for the server certificate")
	}
	if res.Server, err = issueServer(dir, ca, caKey, want, now); err != nil {
		return res, err
	}
	res.Issued = true
	return res, ensureTrust(dir, opts, exact || res.CACreated)
}

// renewReason says why the server certificate current must be issued anew,
// or "" when it can stay: exact wants exactly hosts, otherwise hosts must be
// covered.
func renewReason(current *x509.Certificate, currentErr error, ours bool, hosts []string, exact bool, now time.Time) string {
	switch {
	case current == nil && currentErr != nil && !errors.Is(currentErr, fs.ErrNotExist):
		return "unreadable server certificate: " + currentErr.Error()
	case current == nil:
		return "no server certificate"
	case !ours:
		return "issued by another CA"
	case current.NotAfter.Sub(now) < RenewBefore:
		return "expires on " + current.NotAfter.UTC().Format("2006-01-02")
	case exact && !slices.Equal(certHosts(current), hosts):
		return fmt.Sprintf("hosts changed from %s to %s", strings.Join(certHosts(current), ","), strings.Join(hosts, ","))
	case !exact && len(uncovered(current, hosts)) > 0:
		return "does not cover " + strings.Join(uncovered(current, hosts), ", ")
	}
	return ""
}

// ensureTrust rebuilds trust.pem when always is set or it does not exist.
func ensureTrust(dir string, opts Options, always bool) error {
	if !always {
		if _, err := os.Stat(filepath.Join(CertsDir(dir), TrustFile)); err == nil {
			return nil
		}
	}
	b, err := buildTrust(dir, opts, nil)
	if err != nil {
		return err
	}
	return writeTrust(dir, b)
}

// readCA returns the appliance CA and its key, or nils when there is none.
func readCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	cdir := CertsDir(dir)
	certPath, keyPath := filepath.Join(cdir, CAFile), filepath.Join(cdir, CAKeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	if errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist) {
		return nil, nil, nil
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("appliance CA (%s, %s): %w: restore both files, or remove both to generate a new CA", certPath, keyPath, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("appliance CA key %s cannot sign", keyPath)
	}
	if !pair.Leaf.IsCA {
		return nil, nil, fmt.Errorf("%s is not a CA certificate", certPath)
	}
	return pair.Leaf, signer, nil
}

// readServer returns the leaf of server.pem when server.pem and
// server-key.pem exist and match; nil and the reason otherwise.
func readServer(dir string) (*x509.Certificate, error) {
	pair, err := LoadServerCertificate(dir)
	if err != nil {
		return nil, err
	}
	return pair.Leaf, nil
}

// firstCertificate returns the first certificate of a PEM file, or nil.
func firstCertificate(path string) *x509.Certificate {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	blocks := CertificateBlocks(raw)
	if len(blocks) == 0 {
		return nil
	}
	c, _ := x509.ParseCertificate(blocks[0])
	return c
}

func newCA(dir string, now time.Time) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	host, _ := os.Hostname()
	tag := serial.Text(16)
	tag = tag[:min(len(tag), 8)]
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			Organization: []string{"Coder appliance"},
			// The serial's first bytes keep two CAs made on one host on
			// one day apart: verifiers pick issuers by subject name.
			CommonName: fmt.Sprintf("Coder appliance CA %s %s %s", host, now.UTC().Format("2006-01-02"), tag),
		},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	ca, err := createCert(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cdir := CertsDir(dir)
	if err := writeKey(filepath.Join(cdir, CAKeyFile), key); err != nil {
		return nil, nil, err
	}
	if err := atomicfile.Write(filepath.Join(cdir, CAFile), encodeCert(ca, ""), 0o644); err != nil {
		return nil, nil, err
	}
	return ca, key, nil
}

func issueServer(dir string, ca *x509.Certificate, caKey crypto.Signer, hosts []string, now time.Time) (*x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"Coder appliance"}, CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ServerValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	cert, err := createCert(tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, err
	}
	cdir := CertsDir(dir)
	if err := writeKey(filepath.Join(cdir, ServerKeyFile), key); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(cdir, ServerFile), encodeCert(cert, ""), 0o644); err != nil {
		return nil, err
	}
	return cert, nil
}

func createCert(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

var dnsName = regexp.MustCompile(`^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// normalizeHosts lower-cases, checks, de-duplicates and sorts host names and
// IP addresses.
func normalizeHosts(hosts []string) ([]string, error) {
	var out []string
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == "" {
			continue
		}
		if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil {
			out = append(out, ip.String())
			continue
		}
		if !dnsName.MatchString(h) || len(h) > 253 {
			return nil, fmt.Errorf("%w %q: want a DNS name or an IP address, without scheme or port", ErrInvalidHost, h)
		}
		out = append(out, h)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// certHosts returns a certificate's DNS names and IP addresses, normalised.
func certHosts(c *x509.Certificate) []string {
	hosts := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	out, _ := normalizeHosts(hosts)
	return out
}

// uncovered returns the hosts c is not valid for. A wildcard host
// ("*.apps.example.internal", for subdomain apps) is covered only by that
// same wildcard name.
func uncovered(c *x509.Certificate, hosts []string) []string {
	var missing []string
	for _, h := range hosts {
		if strings.HasPrefix(h, "*.") {
			if !slices.Contains(certHosts(c), h) {
				missing = append(missing, h)
			}
			continue
		}
		if c.VerifyHostname(h) != nil {
			missing = append(missing, h)
		}
	}
	return missing
}
