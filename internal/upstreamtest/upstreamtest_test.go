package upstreamtest

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func client(t *testing.T, u *Upstream) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(u.CAPEM) {
		t.Fatal("CAPEM holds no certificate")
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func get(t *testing.T, c *http.Client, url string) []byte {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return b
}

// TestProviderRegistry walks the registry protocol the way a client does
// and checks the signature and the checksums, and that the knobs break
// what they promise to break.
func TestProviderRegistry(t *testing.T) {
	u := New(t, Options{})
	c := client(t, u)
	var disco map[string]string
	json.Unmarshal(get(t, c, u.URL+"/.well-known/terraform.json"), &disco)
	if disco["providers.v1"] != "/v1/providers/" {
		t.Fatalf("service discovery: got %v", disco)
	}
	var dl struct {
		Filename            string `json:"filename"`
		DownloadURL         string `json:"download_url"`
		ShasumsURL          string `json:"shasums_url"`
		ShasumsSignatureURL string `json:"shasums_signature_url"`
		Shasum              string `json:"shasum"`
		SigningKeys         struct {
			GPGPublicKeys []struct {
				KeyID      string `json:"key_id"`
				ASCIIArmor string `json:"ascii_armor"`
			} `json:"gpg_public_keys"`
		} `json:"signing_keys"`
	}
	if err := json.Unmarshal(get(t, c, u.URL+"/v1/providers/coder/coder/2.20.0/download/linux/amd64"), &dl); err != nil {
		t.Fatal(err)
	}
	keys, err := openpgp.ReadArmoredKeyRing(strings.NewReader(dl.SigningKeys.GPGPublicKeys[0].ASCIIArmor))
	if err != nil {
		t.Fatal(err)
	}
	check := func() error {
		sums := get(t, c, dl.ShasumsURL)
		sig := get(t, c, dl.ShasumsSignatureURL)
		_, err := openpgp.CheckDetachedSignature(keys, bytes.NewReader(sums), bytes.NewReader(sig), nil)
		return err
	}
	if err := check(); err != nil {
		t.Fatalf("good signature: %v", err)
	}
	zip := get(t, c, dl.DownloadURL)
	sum := sha256.Sum256(zip)
	if hex.EncodeToString(sum[:]) != dl.Shasum {
		t.Fatalf("zip sha256 %x, download says %s", sum, dl.Shasum)
	}
	for _, m := range []SignatureMode{SignatureWrongKey, SignatureTampered} {
		u.SetSignature(m)
		if err := check(); err == nil {
			t.Errorf("signature mode %d: got a valid signature, want an invalid one", m)
		}
	}
	u.CorruptZip("2.20.0", "linux_amd64", true)
	bad := get(t, c, dl.DownloadURL)
	if bytes.Equal(bad, zip) {
		t.Error("CorruptZip: the zip did not change")
	}
	if n := u.Count("GET /files/2.20.0/" + dl.Filename); n != 2 {
		t.Errorf("zip GETs counted: got %d, want 2", n)
	}
	u.FailNext("/.well-known/terraform.json", 1)
	if resp, err := c.Get(u.URL + "/.well-known/terraform.json"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("FailNext: got %v, %v; want 503", resp.Status, err)
	}
}

func TestImages(t *testing.T) {
	u := New(t, Options{})
	if len(u.Images) != 2 {
		t.Fatalf("images: got %d, want 2", len(u.Images))
	}
	shared, err := u.SharedLayers()
	if err != nil {
		t.Fatal(err)
	}
	// One base layer per platform and one data layer.
	if len(shared) != 3 {
		t.Errorf("shared layers: got %d, want 3", len(shared))
	}
	for _, img := range u.Images {
		ref, err := name.NewTag("images.test/"+img.Repository+":"+img.Tag, name.StrictValidation)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Get(ref, remote.WithTransport(u.Transport()))
		if err != nil {
			t.Fatal(err)
		}
		if desc.Digest != img.Digest {
			t.Errorf("%s: served digest %s, want %s", img.Ref, desc.Digest, img.Digest)
		}
	}
}
