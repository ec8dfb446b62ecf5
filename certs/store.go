package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// File names inside CertsDir. They are this package's: other packages join
// them to CertsDir rather than spell them again.
const (
	TrustFile     = "trust.pem"
	ImportedDir   = "imported"
	CAFile        = "ca.pem"
	CAKeyFile     = "ca-key.pem"
	ServerFile    = "server.pem"
	ServerKeyFile = "server-key.pem"
)

// RenewBefore is how long before its expiry a certificate counts as expiring:
// Import warns about such a CA and Generate renews such a server certificate.
const RenewBefore = 30 * 24 * time.Hour

// SystemBundles are the operating system CA bundles, in the order they are
// tried (the list Go's crypto/x509 uses on Linux).
var SystemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine
}

// ErrNoTrustStore is returned by Load when DIR/certs/trust.pem does not
// exist yet.
var ErrNoTrustStore = errors.New("certs: no trust store")

// Options are the inputs shared by Import, Generate, EnsureServer and
// Refresh. The zero value uses the system bundle and the real clock.
type Options struct {
	// SystemBundle is the PEM file of system roots copied into trust.pem.
	// Empty means the first of SystemBundles that exists; when none does,
	// trust.pem holds only the appliance's and the imported CAs.
	SystemBundle string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// systemBundle returns the path of the system bundle to use, or "" when
// there is none.
func (o Options) systemBundle() (string, error) {
	if o.SystemBundle != "" {
		if _, err := os.Stat(o.SystemBundle); err != nil {
			return "", fmt.Errorf("system bundle: %w", err)
		}
		return o.SystemBundle, nil
	}
	for _, p := range SystemBundles {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", nil
}

// CertsDir returns the certificate folder of the appliance folder dir.
func CertsDir(dir string) string { return filepath.Join(dir, "certs") }

// Store is a loaded trust store: the certificates of trust.pem. It is
// immutable and safe for concurrent use.
type Store struct {
	file  string
	pool  *x509.CertPool
	count int
}

// Load reads DIR/certs/trust.pem. It fails with an error wrapping
// ErrNoTrustStore when the file does not exist, and when it holds no
// certificate.
func Load(dir string) (*Store, error) {
	file := filepath.Join(CertsDir(dir), TrustFile)
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s: run `coder certs import FILE --dir %s`, `coder certs generate --hosts HOST --dir %s` or `coder certs refresh --dir %s`", ErrNoTrustStore, file, dir, dir, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("load trust store: %w", err)
	}
	pool := x509.NewCertPool()
	count := 0
	for _, der := range CertificateBlocks(b) {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			// Go cannot parse a few odd system roots; Go's own loader
			// skips them too.
			continue
		}
		pool.AddCert(c)
		count++
	}
	if count == 0 {
		return nil, fmt.Errorf("load trust store: %s holds no certificate: run `coder certs refresh --dir %s`", file, dir)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	return &Store{file: abs, pool: pool, count: count}, nil
}

// CertFile returns the absolute path of trust.pem, for SSL_CERT_FILE (and
// the like) of child processes.
func (s *Store) CertFile() string { return s.file }

// Env returns the environment variables that make a child process trust
// exactly the store: SSL_CERT_FILE = trust.pem, and SSL_CERT_DIR = the
// imported/ folder (whose CAs trust.pem holds already). Without SSL_CERT_DIR
// Go programs (terraform, providers) and OpenSSL would also read the
// system's /etc/ssl/certs folder.
func (s *Store) Env() []string {
	return []string{
		"SSL_CERT_FILE=" + s.file,
		"SSL_CERT_DIR=" + filepath.Join(filepath.Dir(s.file), ImportedDir),
	}
}

// Len returns the number of certificates trusted.
func (s *Store) Len() int { return s.count }

// Pool returns a copy of the trusted certificates; changing it does not
// change the store.
func (s *Store) Pool() *x509.CertPool { return s.pool.Clone() }

// TLSConfig returns a client TLS configuration that trusts exactly the
// store's certificates (TLS 1.2 or later). Callers may set ServerName and
// client certificates on it.
func (s *Store) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: s.Pool(), MinVersion: tls.VersionTLS12}
}

// Transport returns a new HTTP transport with the store's TLS configuration,
// the environment's proxy settings and the timeouts of
// http.DefaultTransport.
func (s *Store) Transport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       s.TLSConfig(),
	}
}

// HTTPClient returns a new HTTP client over Transport, without an overall
// timeout (set one, or use request contexts).
func (s *Store) HTTPClient() *http.Client {
	return &http.Client{Transport: s.Transport()}
}
