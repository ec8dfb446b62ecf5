package bundle

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"strings"
	"time"
)

// SchemaVersion is the manifest and part index schema this package writes and
// reads. A reader refuses any other.
const SchemaVersion = 1

// maxManifestSize bounds manifest.json (about 200 bytes per file: a bundle of
// a few hundred thousand files fits).
const maxManifestSize = 64 << 20

// Manifest describes a bundle. It is the first member, signed by manifest.sig.
// The builder fills Name, Release, Platforms, Components and, optionally,
// BuildTime and ToolVersion; [Write] fills the rest.
type Manifest struct {
	// Schema is SchemaVersion.
	Schema int `json:"schema"`
	// Name and Release name the bundle ("acme-coder", "2026.11.1"); both are
	// part of the file name, so letters, digits and . _ + - only.
	Name    string `json:"name"`
	Release string `json:"release"`
	// BuildTime is when the bundle was built: SOURCE_DATE_EPOCH when set,
	// else the clock; whole seconds, UTC. It is also every tar member's mtime.
	BuildTime time.Time `json:"build_time"`
	// ToolVersion is the version of the coder binary that wrote the bundle.
	ToolVersion string `json:"tool_version"`
	// Signed is true when manifest.sig holds a signature. A reader that
	// requires a signature refuses a manifest saying false, and a manifest
	// saying true with an empty manifest.sig is an error: a signature cannot
	// be stripped without changing the signed bytes.
	Signed bool `json:"signed"`
	// KeyID identifies the signing key ([KeyID]); "" when unsigned. It is a
	// hint for error messages, never trusted on its own.
	KeyID string `json:"key_id,omitempty"`
	// Platforms are the "os/arch" pairs the bundle carries binaries for.
	Platforms []string `json:"platforms"`
	// Components say what the payload holds, with versions and provenance.
	Components Components `json:"components"`
	// Files are every payload file, sorted by path.
	Files []File `json:"files"`
}

// File is one payload file.
type File struct {
	// Path is the slash-separated path in the payload, e.g. "bin/coder-linux-amd64".
	Path string `json:"path"`
	// Size is the file's size in bytes (uncompressed).
	Size int64 `json:"size"`
	// SHA256 is the lower-case hex sha256 of the file's bytes (uncompressed).
	SHA256 string `json:"sha256"`
	// Mode is 0644 (420) or 0755 (493).
	Mode uint32 `json:"mode"`
	// Stored is StoredRaw or StoredZstd.
	Stored string `json:"stored"`
	// StoredSize and StoredSHA256 are the size and sha256 of a zstd
	// member's compressed bytes as they are in the bundle, so that
	// verifying the bundle hashes each byte once, without decompressing
	// (extraction still checks the uncompressed Size and SHA256). Empty
	// for raw members, whose stored bytes are the file's.
	StoredSize   int64  `json:"stored_size,omitempty"`
	StoredSHA256 string `json:"stored_sha256,omitempty"`
}

// Components lists what a bundle carries. Paths are payload paths.
type Components struct {
	Coder     []Binary   `json:"coder"`
	Terraform *Terraform `json:"terraform"`
	Postgres  *Postgres  `json:"postgres"`
	Providers []Provider `json:"providers"`
	Images    []Image    `json:"images"`
	Templates []Template `json:"templates"`
	Certs     []Cert     `json:"certs"`
	Modules   []Module   `json:"modules,omitempty"`
}

// Binary is one platform's file of a component.
type Binary struct {
	Platform string `json:"platform"` // "linux/amd64"
	Path     string `json:"path"`     // payload path, e.g. CoderPath(platform)
	Version  string `json:"version"`  // the component's version
	SHA256   string `json:"sha256"`   // hex sha256 of the file; must match the manifest's File
}

// Terraform is the pinned terraform.
type Terraform struct {
	Version string `json:"version"`
	// Source is "releases" (downloaded, GPG-verified) or "local" (a binary on the build host).
	Source   string   `json:"source"`
	Binaries []Binary `json:"binaries"` // Path: TerraformPath(platform)
	// UpstreamSHA256Sums are the lines of HashiCorp's GPG-verified
	// SHA256SUMS for the downloaded zips: zip file name → hex sha256. Empty
	// for a local binary.
	UpstreamSHA256Sums map[string]string `json:"upstream_sha256sums"`
}

// Postgres is the PostgreSQL server for the embedded database.
type Postgres struct {
	Version string `json:"version"`
	// Source is "maven" (zonky's embedded-postgres-binaries) or "local" (a repacked installation).
	Source   string   `json:"source"`
	Archives []Binary `json:"archives"` // Path: PostgresPath("embedded-postgres-binaries-<os>-<arch>-<version>.txz")
}

// Provider is one provider version in the mirror under providers/.
type Provider struct {
	Source    string   `json:"source"` // "registry.terraform.io/coder/coder"
	Version   string   `json:"version"`
	Platforms []string `json:"platforms"`
	// Hashes are the lock-file hashes per platform ("h1:…", "zh:…").
	Hashes   map[string][]string `json:"hashes"`
	Upstream string              `json:"upstream"` // where it was fetched from
}

// Image is one image in the OCI layout under images/.
type Image struct {
	Ref       string   `json:"ref"`    // as requested, e.g. "ghcr.io/coder/envbuilder:1.0.0"
	Digest    string   `json:"digest"` // the index or manifest digest, "sha256:…"
	Platforms []string `json:"platforms"`
	Upstream  string   `json:"upstream"`
	// Referrers are the signatures, attestations and SBOMs that came
	// along with the image (stored in the layout beside it).
	Referrers []ImageReferrer `json:"referrers,omitempty"`
}

// ImageReferrer is an artifact about an image: an OCI 1.1 referrer (its
// subject is the image's upstream digest), or a manifest under cosign's
// tag schema (sha256-<hex>.sig, .att, .sbom).
type ImageReferrer struct {
	Digest       string `json:"digest"`
	ArtifactType string `json:"artifact_type,omitempty"`
	// Kind is signature, attestation, sbom or other.
	Kind string `json:"kind"`
	// Subject is the digest it refers to.
	Subject string `json:"subject"`
	// Tag is the cosign tag schema tag, when it came by tag.
	Tag string `json:"tag,omitempty"`
	// VerifiedWith names the verify: key the signature verified with at
	// build, when one did.
	VerifiedWith string `json:"verified_with,omitempty"`
}

// Module is one Terraform module package under modules/, served by the
// mirror under the module registry protocol as Source at Version.
type Module struct {
	// Source is the registry address HOST/NAMESPACE/NAME/SYSTEM, such as
	// "registry.coder.com/coder/code-server/coder".
	Source  string `json:"source"`
	Version string `json:"version"`
	// Path is the package archive, ModulePath(Source, Version).
	Path string `json:"path"`
	// Subdir is the module's folder inside the package ("" for its root).
	Subdir string `json:"subdir,omitempty"`
	// Upstream is where the package came from: the registry's download
	// location, or the local folder.
	Upstream string `json:"upstream"`
}

// ModulePath is the payload path of a module package.
func ModulePath(source, version string) string {
	return DirModules + "/" + source + "/" + version + ".tar.gz"
}

// Template is one template folder under templates/.
type Template struct {
	Name      string   `json:"name"`
	Path      string   `json:"path"` // TemplatePath(name)
	Providers []string `json:"providers"`
	Images    []string `json:"images"`
}

// Cert is one CA certificate under certs/.
type Cert struct {
	Path     string    `json:"path"` // CertPath(name)
	Subject  string    `json:"subject"`
	NotAfter time.Time `json:"not_after"`
	SHA256   string    `json:"sha256"` // hex sha256 of the PEM file
}

// Validate checks m as a reader would: schema, names, platforms, every file
// (path rules, sorted, no duplicates, no file under another file, mode,
// storage, hash syntax) and that every path a component names is in Files
// (a template's path as a folder). Write and every reader call it.
func (m *Manifest) Validate() error {
	if m.Schema != SchemaVersion {
		return fmt.Errorf("bundle: manifest schema %d, want %d", m.Schema, SchemaVersion)
	}
	if err := validName("name", m.Name); err != nil {
		return fmt.Errorf("bundle: manifest: %w", err)
	}
	if err := validName("release", m.Release); err != nil {
		return fmt.Errorf("bundle: manifest: %w", err)
	}
	for _, p := range m.Platforms {
		if err := validPlatform(p); err != nil {
			return fmt.Errorf("bundle: manifest: %w", err)
		}
	}
	if m.Signed != (m.KeyID != "") {
		return errors.New("bundle: manifest: key_id must be set exactly when signed is true")
	}
	byPath, err := validateFiles(m.Files)
	if err != nil {
		return fmt.Errorf("bundle: manifest: %w", err)
	}
	if err := m.Components.validate(m.Files, byPath); err != nil {
		return fmt.Errorf("bundle: manifest: components: %w", err)
	}
	return nil
}

func validPlatform(p string) error {
	goos, goarch, ok := strings.Cut(p, "/")
	if !ok || validName("os", goos) != nil || validName("arch", goarch) != nil || strings.ContainsAny(p, ".+") {
		return fmt.Errorf("platform %q is not os/arch", p)
	}
	return nil
}

func validSHA256(s string) bool {
	if len(s) != 64 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// validateFiles checks the file list and returns it indexed by path.
func validateFiles(files []File) (map[string]*File, error) {
	byPath := make(map[string]*File, len(files))
	members := make(map[string]string, len(files))
	var total int64
	for i := range files {
		f := &files[i]
		if err := ValidPath(f.Path); err != nil {
			return nil, err
		}
		if i > 0 && files[i-1].Path >= f.Path {
			if files[i-1].Path == f.Path {
				return nil, fmt.Errorf("path %q is listed twice", f.Path)
			}
			return nil, fmt.Errorf("files are not sorted: %q before %q", files[i-1].Path, f.Path)
		}
		if f.Size < 0 {
			return nil, fmt.Errorf("%s: negative size %d", f.Path, f.Size)
		}
		// PayloadSize and the installer's free-space check add the sizes up.
		if f.Size > math.MaxInt64-total {
			return nil, fmt.Errorf("%s: the file sizes add up to more than %d bytes", f.Path, int64(math.MaxInt64))
		}
		total += f.Size
		if !validSHA256(f.SHA256) {
			return nil, fmt.Errorf("%s: sha256 %q is not 64 lower-case hex digits", f.Path, f.SHA256)
		}
		if f.Mode != 0o644 && f.Mode != 0o755 {
			return nil, fmt.Errorf("%s: mode %#o, want 0644 or 0755", f.Path, f.Mode)
		}
		if f.Stored != StoredRaw && f.Stored != StoredZstd {
			return nil, fmt.Errorf("%s: stored %q, want %q or %q", f.Path, f.Stored, StoredRaw, StoredZstd)
		}
		switch {
		case f.StoredSHA256 == "" && f.StoredSize == 0:
		case f.Stored != StoredZstd:
			return nil, fmt.Errorf("%s: stored_size and stored_sha256 are only for %q members", f.Path, StoredZstd)
		case f.StoredSize <= 0 || !validSHA256(f.StoredSHA256):
			return nil, fmt.Errorf("%s: stored_size %d and stored_sha256 %q must be a positive size and 64 lower-case hex digits", f.Path, f.StoredSize, f.StoredSHA256)
		}
		if other, dup := members[memberName(*f)]; dup {
			return nil, fmt.Errorf("%s and %s would both be stored as %s", other, f.Path, memberName(*f))
		}
		members[memberName(*f)] = f.Path
		byPath[f.Path] = f
	}
	// A file may not also be a folder of another file.
	for p := range byPath {
		for dir := p; ; {
			i := strings.LastIndexByte(dir, '/')
			if i < 0 {
				break
			}
			dir = dir[:i]
			if _, ok := byPath[dir]; ok {
				return nil, fmt.Errorf("%q is a file and also a folder of %q", dir, p)
			}
		}
	}
	return byPath, nil
}

// validate checks that the components name files the manifest lists.
func (c *Components) validate(files []File, byPath map[string]*File) error {
	checkBinary := func(what string, b Binary) error {
		if err := validPlatform(b.Platform); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		f, ok := byPath[b.Path]
		if !ok {
			return fmt.Errorf("%s %s: %q is not a payload file", what, b.Platform, b.Path)
		}
		if b.SHA256 != "" && b.SHA256 != f.SHA256 {
			return fmt.Errorf("%s %s: sha256 %s, but the payload file %s has %s", what, b.Platform, b.SHA256, b.Path, f.SHA256)
		}
		return nil
	}
	for _, b := range c.Coder {
		if err := checkBinary("coder", b); err != nil {
			return err
		}
	}
	if c.Terraform != nil {
		for _, b := range c.Terraform.Binaries {
			if err := checkBinary("terraform", b); err != nil {
				return err
			}
		}
	}
	if c.Postgres != nil {
		for _, b := range c.Postgres.Archives {
			if err := checkBinary("postgres", b); err != nil {
				return err
			}
		}
	}
	for _, t := range c.Templates {
		if !hasFolder(files, t.Path) {
			return fmt.Errorf("template %s: %q is not a payload folder", t.Name, t.Path)
		}
	}
	for _, mod := range c.Modules {
		if mod.Path != ModulePath(mod.Source, mod.Version) {
			return fmt.Errorf("module %s %s: path %q, want %q", mod.Source, mod.Version, mod.Path, ModulePath(mod.Source, mod.Version))
		}
		if _, ok := byPath[mod.Path]; !ok {
			return fmt.Errorf("module %s %s: %q is not a payload file", mod.Source, mod.Version, mod.Path)
		}
		if sub := mod.Subdir; sub != "" && (path.Clean(sub) != sub || path.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, "../")) {
			return fmt.Errorf("module %s %s: subdir %q is not a clean relative path", mod.Source, mod.Version, mod.Subdir)
		}
	}
	for _, ct := range c.Certs {
		f, ok := byPath[ct.Path]
		if !ok {
			return fmt.Errorf("cert %q is not a payload file", ct.Path)
		}
		if ct.SHA256 != "" && ct.SHA256 != f.SHA256 {
			return fmt.Errorf("cert %s: sha256 %s, but the payload file has %s", ct.Path, ct.SHA256, f.SHA256)
		}
	}
	return nil
}

// hasFolder reports whether some file in the sorted files lies under dir.
func hasFolder(files []File, dir string) bool {
	if ValidPath(dir+"/x") != nil {
		return false
	}
	prefix := dir + "/"
	for _, f := range files {
		if strings.HasPrefix(f.Path, prefix) {
			return true
		}
	}
	return false
}

// marshalManifest is the canonical encoding: what Write signs.
func marshalManifest(m *Manifest) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown fields
// and trailing data.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// parseManifest decodes and validates manifest.json.
func parseManifest(b []byte) (Manifest, error) {
	var m Manifest
	if err := decodeStrict(b, &m); err != nil {
		return Manifest{}, &VerifyError{File: ManifestMember, Reason: "not a valid manifest: " + err.Error()}
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, &VerifyError{File: ManifestMember, Reason: strings.TrimPrefix(err.Error(), "bundle: ")}
	}
	return m, nil
}

// PayloadSize is the sum of the files' sizes: the space the payload takes
// once extracted.
func (m *Manifest) PayloadSize() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}
