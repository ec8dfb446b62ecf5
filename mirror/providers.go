package mirror

import (
	"airgapcoder/internal/atomicfile"
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
)

// DefaultProviderHost is the hostname of a provider address written with two
// parts ("namespace/type"), as Terraform defines it.
const DefaultProviderHost = "registry.terraform.io"

// zipTime is the modification time of every zip entry, fixed so that the zip
// bytes (and so zh:) depend only on the executable.
var zipTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// Platform is a provider target in Go's and Terraform's spelling.
type Platform struct {
	// OS is the operating system, such as "linux", "darwin" or "windows".
	OS string
	// Arch is the CPU architecture, such as "amd64" or "arm64".
	Arch string
}

// String returns the platform as Terraform writes it: "<os>_<arch>".
func (p Platform) String() string { return p.OS + "_" + p.Arch }

var platformPart = regexp.MustCompile(`^[a-z0-9]+$`)

func (p Platform) validate() error {
	if !platformPart.MatchString(p.OS) || !platformPart.MatchString(p.Arch) {
		return fmt.Errorf("invalid platform %q: os and arch must be lower-case letters and digits", p.String())
	}
	return nil
}

// ParsePlatform parses "<os>_<arch>", such as "linux_amd64".
func ParsePlatform(s string) (Platform, error) {
	os, arch, ok := strings.Cut(s, "_")
	p := Platform{OS: os, Arch: arch}
	if !ok {
		return p, fmt.Errorf("invalid platform %q: want <os>_<arch>", s)
	}
	return p, p.validate()
}

// ProviderAddress is a provider source address: Hostname/Namespace/Type, all
// lower case.
type ProviderAddress struct {
	// Hostname is the provider's origin registry host, such as
	// "registry.terraform.io" or "coder.internal"; it may carry a ":port".
	Hostname string
	// Namespace is the organisation part, such as "hashicorp".
	Namespace string
	// Type is the provider's name, such as "coder"; resources of the provider
	// start with "<type>_".
	Type string
}

// String returns the address as templates write it in required_providers.
func (a ProviderAddress) String() string {
	return a.Hostname + "/" + a.Namespace + "/" + a.Type
}

var (
	hostnamePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$`)
	providerPart    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
)

func (a ProviderAddress) validate() error {
	switch {
	case !hostnamePattern.MatchString(a.Hostname) || strings.Contains(a.Hostname, ".."):
		return fmt.Errorf("invalid provider address %q: bad hostname", a.String())
	case !providerPart.MatchString(a.Namespace):
		return fmt.Errorf("invalid provider address %q: namespace must be letters, digits and inner dashes", a.String())
	case !providerPart.MatchString(a.Type):
		return fmt.Errorf("invalid provider address %q: type must be letters, digits and inner dashes", a.String())
	case strings.HasPrefix(a.Type, "terraform-provider-"):
		return fmt.Errorf("invalid provider address %q: type must not start with terraform-provider-", a.String())
	}
	return nil
}

// ParseProviderAddress parses a source address such as
// "coder.internal/appliance/coder". A two-part address ("hashicorp/null")
// gets DefaultProviderHost, as in Terraform. The result is lower case.
func ParseProviderAddress(s string) (ProviderAddress, error) {
	parts := strings.Split(strings.ToLower(s), "/")
	var a ProviderAddress
	switch len(parts) {
	case 2:
		a = ProviderAddress{Hostname: DefaultProviderHost, Namespace: parts[0], Type: parts[1]}
	case 3:
		a = ProviderAddress{Hostname: parts[0], Namespace: parts[1], Type: parts[2]}
	default:
		return a, fmt.Errorf("invalid provider address %q: want [hostname/]namespace/type", s)
	}
	return a, a.validate()
}

// Index is the content of index.json: the versions present for one provider.
type Index struct {
	// Versions has one key per version ("0.1.0"), each with an empty value.
	Versions map[string]struct{} `json:"versions"`
}

// Release is the content of <version>.json: the archives of one version.
type Release struct {
	// Archives maps a platform ("linux_amd64") to its archive.
	Archives map[string]Archive `json:"archives"`
}

// Archive is one platform's zip in a Release.
type Archive struct {
	// URL is the zip's location relative to the <version>.json file; in
	// trees this package writes, the zip's file name.
	URL string `json:"url"`
	// Hashes are the zip's hashes in Terraform's lock file syntax, h1:
	// first, then zh:.
	Hashes []string `json:"hashes,omitempty"`
}

// ZipName returns the file name of a provider package in the packed layout.
func ZipName(addr ProviderAddress, version string, p Platform) string {
	return fmt.Sprintf("terraform-provider-%s_%s_%s.zip", addr.Type, version, p)
}

// ProviderDir returns the folder of addr's files inside the tree at dir.
func ProviderDir(dir string, addr ProviderAddress) string {
	return filepath.Join(dir, addr.Hostname, addr.Namespace, addr.Type)
}

func validateVersion(version string) error {
	v := "v" + version
	if strings.HasPrefix(version, "v") || !semver.IsValid(v) || semver.Canonical(v) != v {
		return fmt.Errorf("invalid version %q: want a semantic version such as 0.1.0, without a leading v", version)
	}
	return nil
}

// AddProvider packs binary (a provider executable) as
// terraform-provider-<type>_<version>_<os>_<arch>.zip under
// dir/<hostname>/<namespace>/<type>/ (the `terraform providers mirror` packed
// layout), with a fixed zip timestamp so zh: is reproducible, and writes or
// updates index.json and <version>.json, keeping the versions and platforms
// already there. An archive already present for the same version and
// platform is replaced. Every file is written atomically.
func AddProvider(dir string, addr ProviderAddress, version string, p Platform, binary string) error {
	if err := addProvider(dir, addr, version, p, binary); err != nil {
		return fmt.Errorf("add provider %s %s %s: %w", addr, version, p, err)
	}
	return nil
}

func addProvider(dir string, addr ProviderAddress, version string, p Platform, binary string) error {
	entry := fmt.Sprintf("terraform-provider-%s_v%s", addr.Type, version)
	if p.OS == "windows" {
		entry += ".exe"
	}
	if err := validateCoordinates(addr, version, p); err != nil {
		return err
	}
	return storeArchive(dir, addr, version, p, func(w io.Writer) error { return writeZip(w, entry, binary) })
}

func validateCoordinates(addr ProviderAddress, version string, p Platform) error {
	if err := addr.validate(); err != nil {
		return err
	}
	if err := validateVersion(version); err != nil {
		return err
	}
	return p.validate()
}

// storeArchive writes the provider's zip with write (atomically), hashes
// it and records it in <version>.json and index.json. AddProvider and
// AddProviderZip differ only in write.
func storeArchive(dir string, addr ProviderAddress, version string, p Platform, write func(io.Writer) error) error {
	pdir := ProviderDir(dir, addr)
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return err
	}
	zipName := ZipName(addr, version, p)
	var h1, zh string
	err := writeAtomic(filepath.Join(pdir, zipName), func(f *os.File) error {
		if err := write(f); err != nil {
			return err
		}
		var err error
		h1, zh, err = Hashes(f.Name())
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", zipName, err)
	}
	return recordArchive(pdir, version, p, Archive{URL: zipName, Hashes: []string{h1, zh}})
}

// writeZip writes a zip with one entry, name, holding the content of the
// file at src with mode 0755 and the fixed zipTime.
func writeZip(w io.Writer, name, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	zw := zip.NewWriter(w)
	h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: zipTime}
	h.SetMode(0o755)
	ew, err := zw.CreateHeader(h)
	if err != nil {
		return err
	}
	if _, err := io.Copy(ew, in); err != nil {
		return fmt.Errorf("pack %s: %w", src, err)
	}
	return zw.Close()
}

// Hashes returns the h1: hash (dirhash.Hash1 over the files in the zip, as
// Terraform computes it for an installed package) and the zh: hash (hex
// SHA-256 of the zip file) of the zip at zipPath, both with their prefixes.
func Hashes(zipPath string) (h1, zh string, err error) {
	h1, err = dirhash.HashZip(zipPath, dirhash.Hash1)
	if err != nil {
		return "", "", fmt.Errorf("hash %s: %w", zipPath, err)
	}
	f, err := os.Open(zipPath)
	if err != nil {
		return "", "", fmt.Errorf("hash %s: %w", zipPath, err)
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return "", "", fmt.Errorf("hash %s: %w", zipPath, err)
	}
	return h1, "zh:" + hex.EncodeToString(sum.Sum(nil)), nil
}

// ReadIndex reads the index.json of addr in the tree at dir.
func ReadIndex(dir string, addr ProviderAddress) (Index, error) {
	var idx Index
	if err := readJSON(filepath.Join(ProviderDir(dir, addr), "index.json"), &idx); err != nil {
		return idx, fmt.Errorf("read index of %s: %w", addr, err)
	}
	return idx, nil
}

// ReadRelease reads the <version>.json of addr in the tree at dir.
func ReadRelease(dir string, addr ProviderAddress, version string) (Release, error) {
	var rel Release
	if err := validateVersion(version); err != nil {
		return rel, fmt.Errorf("read release of %s: %w", addr, err)
	}
	if err := readJSON(filepath.Join(ProviderDir(dir, addr), version+".json"), &rel); err != nil {
		return rel, fmt.Errorf("read release %s of %s: %w", version, addr, err)
	}
	return rel, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	err = writeAtomic(path, func(f *os.File) error {
		_, err := f.Write(b)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// writeAtomic creates a temporary file next to path, lets write fill it,
// syncs it and renames it to path. On error the temporary file is removed
// and path is untouched.
func writeAtomic(path string, write func(*os.File) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	_ = atomicfile.SyncDir(filepath.Dir(path)) // best effort: the file is already in place
	return nil
}
