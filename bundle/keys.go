package bundle

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"airgapcoder/internal/atomicfile"
)

// Key file names written by GenerateKey.
const (
	PrivateKeyFile = "bundle.key"
	PublicKeyFile  = "bundle.pub"
)

// GenerateKey writes a new ed25519 key pair into dir (created 0700 when
// missing): bundle.key (PKCS#8 PEM, mode 0600) and bundle.pub (PKIX PEM,
// 0644). It refuses to overwrite either file: each is written to a temporary
// file and hard-linked to its name, which fails when the name exists.
func GenerateKey(dir string) (pubPath, keyPath string, err error) {
	keyPath = filepath.Join(dir, PrivateKeyFile)
	pubPath = filepath.Join(dir, PublicKeyFile)
	for _, p := range []string{keyPath, pubPath} {
		if _, err := os.Lstat(p); err == nil {
			return "", "", fmt.Errorf("bundle: generate key: %s exists; refusing to overwrite it", p)
		}
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("bundle: generate key: %w", err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", "", fmt.Errorf("bundle: generate key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", "", fmt.Errorf("bundle: generate key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("bundle: generate key: %w", err)
	}
	if err := writeNew(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600); err != nil {
		return "", "", fmt.Errorf("bundle: generate key: %w", err)
	}
	if err := writeNew(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		_ = os.Remove(keyPath)
		return "", "", fmt.Errorf("bundle: generate key: %w", err)
	}
	return pubPath, keyPath, nil
}

// writeNew writes data to path, which must not exist, atomically.
func writeNew(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists; refusing to overwrite it", path)
		}
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}

// KeyError is a key file that cannot be used: missing, unreadable, not PEM,
// or not the kind of key asked for. The file is always one the user named
// (--public-key, --sign-key), so a command line reports it as a mistake in
// how it was called.
type KeyError struct {
	// Path is the key file as given.
	Path string
	// Public is true when a public key (bundle.pub) was asked for, false for
	// a private key (bundle.key).
	Public bool
	// Reason says what is wrong and what to pass instead.
	Reason string
	// Err is the underlying error, such as a *fs.PathError; nil when the
	// content is what is wrong.
	Err error
}

func (e *KeyError) Error() string {
	what := "private key"
	if e.Public {
		what = "public key"
	}
	return fmt.Sprintf("bundle: %s %s: %s", what, e.Path, e.Reason)
}

func (e *KeyError) Unwrap() error { return e.Err }

// LoadPrivateKey reads a PKCS#8 PEM ed25519 private key (bundle.key, as
// GenerateKey writes it). Every error is a *KeyError.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	der, err := readPEM(path, false)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, &KeyError{Path: path, Reason: fmt.Sprintf("not a PKCS#8 private key (%v): pass the %s that coder bundle keygen wrote", err, PrivateKeyFile), Err: err}
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, &KeyError{Path: path, Reason: fmt.Sprintf("%s, want an ed25519 key: bundles are signed with the ed25519 %s that coder bundle keygen writes", keyKind(k), PrivateKeyFile)}
	}
	return priv, nil
}

// LoadPublicKey reads a PKIX PEM ed25519 public key (bundle.pub, as
// GenerateKey writes it). Every error is a *KeyError.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	der, err := readPEM(path, true)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, &KeyError{Path: path, Public: true, Reason: fmt.Sprintf("not a PKIX public key (%v): pass the %s that coder bundle keygen wrote", err, PublicKeyFile), Err: err}
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, &KeyError{Path: path, Public: true, Reason: fmt.Sprintf("%s, want an ed25519 key: pass the %s that coder bundle keygen wrote beside the signing key", keyKind(k), PublicKeyFile)}
	}
	return pub, nil
}

// readPEM returns the DER bytes of the key file's first PEM block, which
// must be a public or a private key as asked.
func readPEM(path string, public bool) ([]byte, error) {
	want, wantFile, other, otherFile := "PRIVATE KEY", PrivateKeyFile, "PUBLIC KEY", PublicKeyFile
	if public {
		want, wantFile, other, otherFile = other, otherFile, want, wantFile
	}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &KeyError{Path: path, Public: public, Reason: fmt.Sprintf("no such file (coder bundle keygen writes %s)", wantFile), Err: err}
	case err != nil:
		return nil, &KeyError{Path: path, Public: public, Reason: fmt.Sprintf("cannot read it: %v", unwrapPath(err)), Err: err}
	}
	block, _ := pem.Decode(b)
	switch {
	case block == nil:
		return nil, &KeyError{Path: path, Public: public, Reason: fmt.Sprintf("not a PEM file (want a %q block): pass the %s that coder bundle keygen wrote", want, wantFile)}
	case block.Type == other:
		return nil, &KeyError{Path: path, Public: public, Reason: fmt.Sprintf("holds a %s, want a %s: pass %s, not %s", other, want, wantFile, otherFile)}
	case block.Type != want:
		return nil, &KeyError{Path: path, Public: public, Reason: fmt.Sprintf("holds a %q PEM block, want a %q: pass the %s that coder bundle keygen wrote", block.Type, want, wantFile)}
	}
	return block.Bytes, nil
}

// unwrapPath drops the path a *fs.PathError repeats: KeyError names it.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// keyKind names a parsed key's algorithm for messages.
func keyKind(k any) string {
	switch k.(type) {
	case *rsa.PublicKey, *rsa.PrivateKey:
		return "an RSA key"
	case *ecdsa.PublicKey, *ecdsa.PrivateKey:
		return "an ECDSA key"
	case *ecdh.PublicKey, *ecdh.PrivateKey:
		return "an ECDH (X25519) key"
	}
	return fmt.Sprintf("a %T key", k)
}

// KeyID names a public key: "sha256:" and the hex sha256 of its PKIX DER
// encoding, the same as
//
//	openssl pkey -pubin -in bundle.pub -outform DER | sha256sum
func KeyID(pub ed25519.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "invalid"
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}
