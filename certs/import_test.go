package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"airgapcoder/internal/testfs"
)

func TestImport(t *testing.T) {
	dir := t.TempDir()
	opts, sysRoot := fakeSystem(t)
	caA := makeCert(t, certSpec{cn: "Corp Root A", ca: true})
	caB := makeCert(t, certSpec{cn: "Corp Issuing B", ca: true, parent: &caA})
	bundle := writeTemp(t, "bundle.pem", append(append([]byte("# a comment before the blocks\n"), caA.pem()...), caB.pem()...))
	again := writeTemp(t, "again.pem", caA.pem())

	res, err := Import(dir, []string{bundle, again}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Added) != 2 || len(res.Duplicates) != 1 || len(res.Warnings) != 0 {
		t.Fatalf("got %d added, %d duplicates, warnings %v; want 2, 1, none", len(res.Added), len(res.Duplicates), res.Warnings)
	}
	if got := testfs.Names(t, filepath.Join(CertsDir(dir), ImportedDir)); len(got) != 2 {
		t.Fatalf("imported/: got %v, want two files", got)
	}

	store, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if store.Len() != 3 {
		t.Errorf("trust store: got %d certificates, want 3 (system root + two CAs)", store.Len())
	}
	if want := filepath.Join(CertsDir(dir), TrustFile); store.CertFile() != want {
		t.Errorf("CertFile: got %s, want %s", store.CertFile(), want)
	}
	trust := readFile(t, store.CertFile())
	for _, c := range []testCert{sysRoot, caA, caB} {
		if !bytes.Contains(trust, c.pem()) {
			t.Errorf("trust.pem lacks %s", c.cert.Subject)
		}
	}
	if i, j := bytes.Index(trust, sysRoot.pem()), bytes.Index(trust, caA.pem()); i > j {
		t.Errorf("trust.pem: system roots must come first")
	}

	// A leaf issued by an imported CA verifies with the store's pool.
	leaf := makeCert(t, certSpec{cn: "svc", dnsNames: []string{"svc.corp"}, parent: &caB})
	inter := x509.NewCertPool()
	if _, err := leaf.cert.Verify(x509.VerifyOptions{Roots: store.Pool(), Intermediates: inter, DNSName: "svc.corp"}); err != nil {
		t.Errorf("leaf of an imported CA: %v", err)
	}

	// Importing the same again changes nothing, byte for byte.
	res, err = Import(dir, []string{bundle}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Added) != 0 || len(res.Duplicates) != 2 {
		t.Errorf("second import: got %d added, %d duplicates; want 0, 2", len(res.Added), len(res.Duplicates))
	}
	if got := readFile(t, store.CertFile()); !bytes.Equal(got, trust) {
		t.Errorf("trust.pem changed on a second import of the same CAs")
	}

	// A DER certificate is accepted too.
	caC := makeCert(t, certSpec{cn: "Corp DER C", ca: true})
	if res, err = Import(dir, []string{writeTemp(t, "c.der", caC.cert.Raw)}, opts); err != nil || len(res.Added) != 1 {
		t.Fatalf("DER import: got %v, %d added; want 1 added", err, len(res.Added))
	}
}

// TestImportRefused checks each kind of bad input is refused with its own
// message and leaves the store byte-identical.
func TestImportRefused(t *testing.T) {
	dir := t.TempDir()
	opts, _ := fakeSystem(t)
	good := makeCert(t, certSpec{cn: "Good CA", ca: true})
	goodFile := writeTemp(t, "good.pem", good.pem())
	if _, err := Import(dir, []string{goodFile}, opts); err != nil {
		t.Fatal(err)
	}
	trustPath := filepath.Join(CertsDir(dir), TrustFile)
	before := readFile(t, trustPath)
	importedBefore := testfs.Names(t, filepath.Join(CertsDir(dir), ImportedDir))

	expired := makeCert(t, certSpec{cn: "Old CA", ca: true, notBefore: time.Now().Add(-3 * 365 * 24 * time.Hour), notAfter: time.Now().Add(-24 * time.Hour)})
	future := makeCert(t, certSpec{cn: "Future CA", ca: true, notBefore: time.Now().Add(48 * time.Hour), notAfter: time.Now().Add(400 * 24 * time.Hour)})
	leaf := makeCert(t, certSpec{cn: "www.corp", dnsNames: []string{"www.corp"}, parent: &good})
	noSign := makeCert(t, certSpec{cn: "No Sign CA", ca: true, noCertSign: true})
	fresh := makeCert(t, certSpec{cn: "Fresh CA", ca: true})
	csr := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("not really")})
	truncated := fresh.pem()
	truncated = truncated[:len(truncated)-40]

	tests := []struct {
		name  string
		files [][]byte
		want  string
	}{
		{"expired CA", [][]byte{expired.pem()}, "expired on"},
		{"not yet valid CA", [][]byte{future.pem()}, "not valid before"},
		{"leaf", [][]byte{leaf.pem()}, "not a CA certificate"},
		{"CA that cannot sign", [][]byte{noSign.pem()}, "does not allow signing certificates"},
		{"garbage", [][]byte{[]byte("hello, this is not a certificate\n")}, "not a certificate: no PEM block"},
		{"private key", [][]byte{fresh.keyPEM(t)}, "private key (PRIVATE KEY)"},
		{"EC private key", [][]byte{pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1}})}, "private key (EC PRIVATE KEY)"},
		{"certificate request", [][]byte{csr}, "is a CERTIFICATE REQUEST, not a CERTIFICATE"},
		{"truncated PEM", [][]byte{truncated}, "malformed PEM"},
		{"bad DER in a block", [][]byte{pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})}, "not a valid certificate"},
		{"empty file", [][]byte{{}}, "not a certificate"},
		// A good CA next to a bad one: nothing is imported.
		{"bundle with a leaf", [][]byte{append(fresh.pem(), leaf.pem()...)}, "certificate 2 of 2"},
		{"good file then a key", [][]byte{fresh.pem(), fresh.keyPEM(t)}, "private key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var files []string
			for i, b := range tt.files {
				files = append(files, writeTemp(t, "in"+string(rune('0'+i))+".pem", b))
			}
			res, err := Import(dir, files, opts)
			if err == nil {
				t.Fatalf("got no error (added %d), want one containing %q", len(res.Added), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "nothing changed") && !strings.Contains(err.Error(), "no files") {
				t.Errorf("error: got %q, want it to contain %q and say nothing changed", err, tt.want)
			}
			if got := readFile(t, trustPath); !bytes.Equal(got, before) {
				t.Errorf("trust.pem changed after a refused import")
			}
			if got := testfs.Names(t, filepath.Join(CertsDir(dir), ImportedDir)); !slices.Equal(got, importedBefore) {
				t.Errorf("imported/: got %v, want %v", got, importedBefore)
			}
		})
	}

	if _, err := Import(dir, []string{filepath.Join(t.TempDir(), "missing.pem")}, opts); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want an error wrapping ErrNotExist", err)
	}
}

func TestImportWarnsExpiringSoon(t *testing.T) {
	opts, _ := fakeSystem(t)
	soon := makeCert(t, certSpec{cn: "Soon CA", ca: true, notAfter: time.Now().Add(10 * 24 * time.Hour)})
	res, err := Import(t.TempDir(), []string{writeTemp(t, "soon.pem", soon.pem())}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Added) != 1 || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "expires soon") {
		t.Errorf("got %d added, warnings %q; want 1 added and an 'expires soon' warning", len(res.Added), res.Warnings)
	}
}

// TestSystemBundle checks trust.pem starts from the machine's own roots.
func TestSystemBundle(t *testing.T) {
	var sys string
	for _, p := range SystemBundles {
		if _, err := os.Stat(p); err == nil {
			sys = p
			break
		}
	}
	if sys == "" {
		t.Fatal("no system CA bundle on this machine (scripts/install-deps.sh installs ca-certificates)")
	}
	roots := CertificateBlocks(readFile(t, sys))
	dir := t.TempDir()
	if err := Refresh(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	store, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	trust := readFile(t, store.CertFile())
	if !bytes.Contains(trust, []byte(sys)) {
		t.Errorf("trust.pem header does not name %s", sys)
	}
	for _, der := range roots[:min(5, len(roots))] {
		if !bytes.Contains(trust, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})) {
			t.Fatalf("trust.pem lacks a root of %s", sys)
		}
	}
	// The same inputs give the same bytes.
	if err := Refresh(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, store.CertFile()), trust) {
		t.Error("trust.pem differs between two refreshes")
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load(t.TempDir())
	if !errors.Is(err, ErrNoTrustStore) || !strings.Contains(err.Error(), "coder certs import") {
		t.Errorf("got %v, want ErrNoTrustStore with a hint", err)
	}
}
