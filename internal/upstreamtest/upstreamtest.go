// Package upstreamtest is the internet that bundle build talks to, for
// tests: one HTTPS server on 127.0.0.1, with a certificate from a CA of its
// own, that speaks
//
//   - the Terraform provider registry protocol (service discovery, versions,
//     download) for our provider, with a SHA256SUMS file signed by a GPG key
//     generated in-process, under any host name (tests map a host such as
//     registry.terraform.io to the server with bundle.yaml's registries:);
//   - the OCI distribution API (go-containerregistry's in-memory
//     pkg/registry) holding multi-platform images that share layers and,
//     when asked, a runnable Linux workspace image built from the build
//     host's busybox and curl (see WorkspaceRef);
//   - a Maven repository tree with fake zonky embedded-postgres jars;
//   - a HashiCorp releases tree (as hc-install reads it) with a stand-in
//     terraform for the build host's platform.
//
// It counts requests per path so tests can say "no blob was fetched twice",
// and has knobs that make it misbehave: a corrupted zip, a bad signature, a
// path that fails a few times before it works. It must only be used from
// tests: it builds our provider with the go command.
package upstreamtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"airgapcoder/internal/testtier"
)

// Options configure an Upstream. The zero value serves our provider 2.20.0
// for linux_amd64 and linux_arm64, two images for linux/amd64 and
// linux/arm64, and PostgreSQL 16.9.0 jars.
type Options struct {
	// ProviderVersions are the versions of our provider the registry
	// offers. Default: ["2.20.0"].
	ProviderVersions []string
	// ProviderPlatforms are the "os_arch" platforms of each version.
	// Default: linux_amd64 and linux_arm64. Only the build host's platform
	// holds a binary that runs; the others hold the same executable (their
	// hashes are what tests look at).
	ProviderPlatforms []string
	// ImagePlatforms are the "os/arch" platforms of each image. Default:
	// linux/amd64 and linux/arm64.
	ImagePlatforms []string
	// LayerSize is the size of each random image layer. Default 256 KiB.
	LayerSize int64
	// PostgresVersion is the version of the fake zonky jars. Default
	// "16.9.0".
	PostgresVersion string
	// TerraformVersion is the version of the releases tree. Default
	// "1.11.4".
	TerraformVersion string
	// WorkspaceImage adds the workspace image, a runnable image for the
	// build host's platform only, as WorkspaceRef (Upstream.Workspace).
	// It needs this machine's /bin/busybox (busybox-static) and
	// /usr/bin/curl. Default false: no workspace image.
	WorkspaceImage bool
}

// Upstream is a running test upstream. Its methods are safe for concurrent
// use.
type Upstream struct {
	// URL is the server's base URL, "https://127.0.0.1:<port>".
	URL string
	// CAPEM is the PEM of the CA that signed the server's certificate.
	CAPEM []byte
	// CAFile is a file holding CAPEM, for bundle.yaml's certs:.
	CAFile string
	// Provider describes the provider the registry serves.
	Provider Provider
	// Images are the random-layer images the registry holds, in creation
	// order. The workspace image is not among them.
	Images []Image
	// Workspace is the workspace image when Options.WorkspaceImage is
	// set, nil otherwise. Its Ref is WorkspaceRef, its Digest the index's
	// and Platforms holds the one manifest.
	Workspace *Image
	// Signed is what the upstream signed: images.test/team/tool:2, with a
	// cosign signature under the tag schema and as a referrer, and an SBOM
	// referrer, all by CosignPublicKey's key.
	Signed *SignedImage
	// CosignPublicKey is the signing key's public half in PEM (cosign.pub),
	// and CosignKeyFile a file holding it.
	CosignPublicKey []byte
	CosignKeyFile   string
	// Postgres describes the fake zonky jars.
	Postgres Postgres
	// Releases describes the terraform releases tree.
	Releases Releases

	srv  *httptest.Server
	opts Options
	// cosignKey signs Signed; artifactBlobs are the digests of what it
	// pushed (manifests, configs, layers).
	cosignKey     *ecdsa.PrivateKey
	artifactBlobs map[v1.Hash]bool

	mu     sync.Mutex
	counts map[string]int
	fails  map[string]int
	knobs  knobs
}

type knobs struct {
	corruptZip map[string]bool // zip file name → serve corrupted bytes
	signature  SignatureMode
}

// SignatureMode says how the registry signs SHA256SUMS.
type SignatureMode int

const (
	// SignatureGood is a valid signature by the announced key.
	SignatureGood SignatureMode = iota
	// SignatureWrongKey is a valid signature by a key the registry does
	// not announce.
	SignatureWrongKey
	// SignatureTampered is the good signature over a SHA256SUMS that was
	// changed after signing.
	SignatureTampered
)

// New starts an upstream and stops it when the test ends.
func New(t testing.TB, opts Options) *Upstream {
	t.Helper()
	testtier.Heavy(t, "builds the Coder Terraform provider")
	if len(opts.ProviderVersions) == 0 {
		opts.ProviderVersions = []string{"2.20.0"}
	}
	if len(opts.ProviderPlatforms) == 0 {
		opts.ProviderPlatforms = []string{"linux_amd64", "linux_arm64"}
	}
	if len(opts.ImagePlatforms) == 0 {
		opts.ImagePlatforms = []string{"linux/amd64", "linux/arm64"}
	}
	if opts.LayerSize == 0 {
		opts.LayerSize = 256 << 10
	}
	if opts.PostgresVersion == "" {
		opts.PostgresVersion = "16.9.0"
	}
	if opts.TerraformVersion == "" {
		opts.TerraformVersion = "1.11.4"
	}
	u := &Upstream{
		opts:   opts,
		counts: map[string]int{},
		fails:  map[string]int{},
		knobs:  knobs{corruptZip: map[string]bool{}},
	}
	caPEM, serverCert, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	u.CAPEM = caPEM
	u.CAFile = filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(u.CAFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}

	cosignKey, cosignPub, err := newCosignKey()
	if err != nil {
		t.Fatal(err)
	}
	u.cosignKey, u.CosignPublicKey = cosignKey, cosignPub
	u.CosignKeyFile = filepath.Join(t.TempDir(), "cosign.pub")
	if err := os.WriteFile(u.CosignKeyFile, cosignPub, 0o644); err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	u.srv = httptest.NewUnstartedServer(u.count(mux))
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	u.URL = u.srv.URL

	if err := u.setupProvider(mux); err != nil {
		t.Fatal(err)
	}
	if err := u.setupImages(mux); err != nil {
		t.Fatal(err)
	}
	if err := u.setupModules(mux, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := u.setupMaven(mux); err != nil {
		t.Fatal(err)
	}
	if err := u.setupReleases(mux); err != nil {
		t.Fatal(err)
	}
	return u
}

// count records every request by path, and fails it when FailNext asked so.
func (u *Upstream) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.counts[r.Method+" "+r.URL.Path]++
		fail := u.fails[r.URL.Path] > 0
		if fail {
			u.fails[r.URL.Path]--
		}
		u.mu.Unlock()
		if fail {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Count returns how many requests "METHOD /path" got.
func (u *Upstream) Count(methodPath string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.counts[methodPath]
}

// Counts returns a copy of all request counts, keyed "METHOD /path".
func (u *Upstream) Counts() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := make(map[string]int, len(u.counts))
	for k, v := range u.counts {
		m[k] = v
	}
	return m
}

// ResetCounts forgets every request counted so far.
func (u *Upstream) ResetCounts() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.counts = map[string]int{}
}

// BlobGets returns the GET counts of paths that carry content: image
// blobs, provider zips and Maven jars (not manifests, metadata or
// signatures).
func (u *Upstream) BlobGets() map[string]int {
	m := map[string]int{}
	for k, v := range u.Counts() {
		path, ok := strings.CutPrefix(k, "GET ")
		if !ok {
			continue
		}
		if strings.Contains(path, "/blobs/sha256:") || strings.HasSuffix(path, ".zip") || strings.HasSuffix(path, ".jar") {
			m[path] = v
		}
	}
	return m
}

// Paths returns every counted "METHOD /path", sorted, for messages.
func (u *Upstream) Paths() []string {
	var ps []string
	for k := range u.Counts() {
		ps = append(ps, k)
	}
	sort.Strings(ps)
	return ps
}

// FailNext makes the next n requests for path answer 503.
func (u *Upstream) FailNext(path string, n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.fails[path] = n
}

// CorruptZip makes the registry serve a zip for version and platform
// ("linux_amd64") whose bytes differ from what SHA256SUMS lists.
func (u *Upstream) CorruptZip(version, platform string, corrupt bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.knobs.corruptZip[zipName(u.Provider.Type, version, platform)] = corrupt
}

// SetSignature sets how SHA256SUMS is signed from now on.
func (u *Upstream) SetSignature(m SignatureMode) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.knobs.signature = m
}

func (u *Upstream) currentKnobs() (corrupt map[string]bool, sig SignatureMode) {
	u.mu.Lock()
	defer u.mu.Unlock()
	corrupt = make(map[string]bool, len(u.knobs.corruptZip))
	for k, v := range u.knobs.corruptZip {
		corrupt[k] = v
	}
	return corrupt, u.knobs.signature
}

// Transport returns a transport that trusts the upstream's CA and sends
// every request, whatever its host, to the upstream, for tests that talk
// to it directly (crane, for instance).
func (u *Upstream) Transport() http.RoundTripper {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(u.CAPEM)
	addr := u.srv.Listener.Addr().String()
	return &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"},
		ForceAttemptHTTP2: true,
	}
}

// newCA makes a CA and a server certificate for 127.0.0.1 and localhost.
func newCA() (caPEM []byte, server tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, server, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "upstreamtest CA", Organization: []string{"airgapcoder tests"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, server, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, server, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, server, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, server, err
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	server = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return caPEM, server, nil
}
