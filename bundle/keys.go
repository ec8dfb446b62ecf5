package bundle

import (
	"airgapcoder/internal/atomicfile"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// LoadPrivateKey reads a PKCS#8 PEM ed25519 private key (bundle.key).
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	der, err := readPEM(path, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("bundle: private key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("bundle: private key %s: a %T, want ed25519", path, k)
	}
	return priv, nil
}

// LoadPublicKey reads a PKIX PEM ed25519 public key (bundle.pub).
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	der, err := readPEM(path, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("bundle: public key %s: %w", path, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("bundle: public key %s: a %T, want ed25519", path, k)
	}
	return pub, nil
}

func readPEM(path, typ string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bundle: read key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("bundle: key %s: no PEM block", path)
	}
	if block.Type != typ {
		return nil, fmt.Errorf("bundle: key %s: PEM type %q, want %q", path, block.Type, typ)
	}
	return block.Bytes, nil
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
