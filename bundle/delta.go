package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// # Delta bundles
//
// A delta bundle carries the full manifest of a release (signed, byte for
// byte what the full bundle's would be) but only the payload files a site
// lacks; the rest it takes from a release the site has installed, its base.
// Its members are the full bundle's with two more after manifest.sig:
//
//	delta.json   the Delta: the base (name, release, FilesDigest of its
//	             manifest) and every omitted file with the base path that
//	             holds the same bytes
//	delta.sig    its ed25519 signature by the bundle key (empty when the
//	             manifest is unsigned)
//
// then payload/<path> for the carried files only, in manifest order.
// Extracting one (ExtractOptions.BaseDir) takes each omitted file from the
// base release (a hard link, or a copy), checking it against the manifest's
// size and sha256, so the result is exactly the full release: every file
// checked against the signed manifest, whichever way it came.
//
// The site says what it has with an Inventory (`coder appliance
// inventory`), which `coder bundle build --against` reads.

// Members of a delta bundle.
const (
	DeltaMember    = "delta.json"
	DeltaSigMember = "delta.sig"
)

// maxDeltaSize bounds delta.json.
const maxDeltaSize = 64 << 20

// Delta is a delta bundle's delta.json.
type Delta struct {
	// FilesDigest is the FilesDigest of the bundle's own manifest: the
	// delta belongs to that manifest and no other.
	FilesDigest string `json:"files_digest"`
	// Base is the release the omitted files come from.
	Base DeltaBase `json:"base"`
	// Omitted are the manifest files the bundle does not carry, sorted by
	// path.
	Omitted []DeltaFile `json:"omitted"`
	// PayloadSize is what the full bundle's payload members would take,
	// CarriedSize what this one's take (bytes as stored).
	PayloadSize int64 `json:"payload_size"`
	CarriedSize int64 `json:"carried_size"`
}

// DeltaBase names a delta bundle's base release.
type DeltaBase struct {
	Name    string `json:"name"`
	Release string `json:"release"`
	// FilesDigest is the base manifest's FilesDigest: the release's exact
	// content.
	FilesDigest string `json:"files_digest"`
}

// DeltaFile is an omitted file: Path in the new release has the bytes of
// BasePath in the base release.
type DeltaFile struct {
	Path     string `json:"path"`
	BasePath string `json:"base_path"`
}

// FilesDigest is a digest of the manifest's file list (path, size, sha256
// and mode of every file): two releases with the same digest hold the same
// payload.
func (m *Manifest) FilesDigest() string {
	h := sha256.New()
	for _, f := range m.Files {
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00%o\n", f.Path, f.Size, f.SHA256, f.Mode)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// storedSize is what a file's member takes in a bundle.
func (f File) storedSize() int64 {
	if f.Stored == StoredZstd && f.StoredSize > 0 {
		return f.StoredSize
	}
	return f.Size
}

// Contents finds a manifest's files by what they hold (size and sha256),
// the way a delta bundle matches them: a delta against the manifest omits
// every file whose bytes it has, under any path. The zero value holds
// nothing.
type Contents struct {
	paths map[contentKey]string
}

type contentKey struct {
	size   int64
	sha256 string
}

// Contents indexes m's files by what they hold.
func (m *Manifest) Contents() Contents {
	c := Contents{paths: make(map[contentKey]string, len(m.Files))}
	for _, f := range m.Files {
		c.paths[contentKey{f.Size, f.SHA256}] = f.Path
	}
	return c
}

// Path returns the path of a file of that size and (hex) sha256.
func (c Contents) Path(size int64, sha256 string) (string, bool) {
	p, ok := c.paths[contentKey{size, sha256}]
	return p, ok
}

// planDelta decides which of m's files a bundle built against base omits:
// those whose bytes the base has (Contents).
func planDelta(m *Manifest, base *Manifest) *Delta {
	have := base.Contents()
	d := &Delta{FilesDigest: m.FilesDigest(), Base: DeltaBase{Name: base.Name, Release: base.Release, FilesDigest: base.FilesDigest()}, Omitted: []DeltaFile{}}
	for _, f := range m.Files {
		d.PayloadSize += f.storedSize()
		if p, ok := have.Path(f.Size, f.SHA256); ok {
			d.Omitted = append(d.Omitted, DeltaFile{Path: f.Path, BasePath: p})
			continue
		}
		d.CarriedSize += f.storedSize()
	}
	return d
}

// carried returns m's files that d does not omit, in order.
func (d *Delta) carried(m *Manifest) []File {
	if d == nil {
		return m.Files
	}
	omitted := make(map[string]bool, len(d.Omitted))
	for _, o := range d.Omitted {
		omitted[o.Path] = true
	}
	var out []File
	for _, f := range m.Files {
		if !omitted[f.Path] {
			out = append(out, f)
		}
	}
	return out
}

// parseDelta decodes delta.json strictly and checks it against m.
func parseDelta(raw []byte, m *Manifest) (*Delta, error) {
	var d Delta
	bad := func(format string, args ...any) error {
		return &VerifyError{File: DeltaMember, Reason: fmt.Sprintf(format, args...)}
	}
	if err := decodeStrict(raw, &d); err != nil {
		return nil, bad("not a valid delta: %v", err)
	}
	if err := validName("base name", d.Base.Name); err != nil {
		return nil, bad("%v", err)
	}
	if err := validName("base release", d.Base.Release); err != nil {
		return nil, bad("%v", err)
	}
	if len(d.Base.FilesDigest) != 64 {
		return nil, bad("the base's files digest %q is not a sha256", d.Base.FilesDigest)
	}
	if d.FilesDigest != m.FilesDigest() {
		return nil, bad("the delta belongs to another manifest (files digest %s, this one's is %s)", d.FilesDigest, m.FilesDigest())
	}
	files := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		files[f.Path] = true
	}
	for i, o := range d.Omitted {
		if !files[o.Path] {
			return nil, bad("omitted file %s is not in the manifest", o.Path)
		}
		if i > 0 && d.Omitted[i-1].Path >= o.Path {
			return nil, bad("omitted files are not sorted, or repeated, at %s", o.Path)
		}
		if err := ValidPath(o.BasePath); err != nil {
			return nil, bad("omitted file %s: base path: %v", o.Path, err)
		}
	}
	return &d, nil
}

// copyFromBase puts the omitted files into root from the base release at
// baseDir, each checked against the manifest's size and sha256. A base
// file with the manifest's mode is hard-linked once checked (releases are
// never written after install, and both sit in the same folder tree), so
// assembling reads each byte once and writes none; otherwise, or where
// links fail, it is copied, checked as it goes.
func (u *unpacker) copyFromBase(m *Manifest, d *Delta, baseDir string) error {
	byPath := make(map[string]File, len(m.Files))
	for _, f := range m.Files {
		byPath[f.Path] = f
	}
	for _, o := range d.Omitted {
		f := byPath[o.Path]
		src := filepath.Join(baseDir, filepath.FromSlash(o.BasePath))
		linked, err := u.linkChecked(f, o, src)
		if err != nil {
			return err
		}
		if linked {
			continue
		}
		in, err := os.Open(src)
		if err != nil {
			return &VerifyError{File: o.Path, Reason: fmt.Sprintf("the base release has no %s: %v", o.BasePath, errors.Unwrap(err))}
		}
		cr := &checkedReader{r: io.LimitReader(in, f.Size+1), h: sha256.New()}
		err = u.file(f, cr)
		in.Close()
		if err != nil {
			return fmt.Errorf("bundle: %s from the base release: %w", o.Path, err)
		}
		if err := checkBaseFile(f, o, cr); err != nil {
			return err
		}
	}
	return nil
}

// linkChecked hashes the base file src and, when it is f with f's mode,
// hard-links it into place. It reports false (and no error) when the file
// must be copied instead.
func (u *unpacker) linkChecked(f File, o DeltaFile, src string) (bool, error) {
	st, err := os.Stat(src)
	if err != nil {
		return false, &VerifyError{File: o.Path, Reason: fmt.Sprintf("the base release has no %s: %v", o.BasePath, errors.Unwrap(err))}
	}
	if !st.Mode().IsRegular() || uint32(st.Mode().Perm()) != f.Mode {
		return false, nil
	}
	in, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("bundle: %s from the base release: %w", o.Path, err)
	}
	cr := &checkedReader{r: io.LimitReader(in, f.Size+1), h: sha256.New()}
	_, err = io.CopyBuffer(io.Discard, cr, u.buf)
	in.Close()
	if err != nil {
		return false, fmt.Errorf("bundle: %s from the base release: %w", o.Path, err)
	}
	if err := checkBaseFile(f, o, cr); err != nil {
		return false, err
	}
	dst := filepath.Join(u.root, filepath.FromSlash(f.Path))
	if err := u.mkdirs(filepath.Dir(dst)); err != nil {
		return false, err
	}
	return os.Link(src, dst) == nil, nil
}

// checkBaseFile checks what was read of a base file against f.
func checkBaseFile(f File, o DeltaFile, cr *checkedReader) error {
	if got := hex.EncodeToString(cr.h.Sum(nil)); cr.n != f.Size || got != f.SHA256 {
		return &VerifyError{File: o.Path, Reason: fmt.Sprintf("the base release's %s has %d bytes with sha256 %s, want %d with %s (changed since it was installed?)",
			o.BasePath, cr.n, got, f.Size, f.SHA256)}
	}
	return nil
}

// DeltaFileName is the file name of a delta bundle of release against
// base: <name>-<release>-from-<base>.bundle.
func DeltaFileName(name, release, base string) string {
	return name + "-" + release + "-from-" + base + Extension
}

// Inventory is what an installed appliance has, for building a delta
// against it (`coder appliance inventory`, `coder bundle build
// --against`). It carries no secret: the current release's manifest (the
// digests of every file it holds) and the image blobs present.
type Inventory struct {
	// Schema is InventorySchema.
	Schema int `json:"inventory_schema"`
	// Name and Release are the current release's.
	Name    string `json:"name"`
	Release string `json:"release"`
	// FilesDigest is Manifest's FilesDigest.
	FilesDigest string `json:"files_digest"`
	// Manifest is the current release's manifest.
	Manifest Manifest `json:"manifest"`
	// ImageBlobs and ProviderArchives are the sha256 digests of the image
	// blobs and provider archives present, sorted.
	ImageBlobs       []string `json:"image_blobs"`
	ProviderArchives []string `json:"provider_archives"`
}

// InventorySchema is the Inventory version this program writes and reads.
const InventorySchema = 1

// NewInventory describes the release m.
func NewInventory(m Manifest) Inventory {
	inv := Inventory{Schema: InventorySchema, Name: m.Name, Release: m.Release, FilesDigest: m.FilesDigest(), Manifest: m,
		ImageBlobs: []string{}, ProviderArchives: []string{}}
	for _, f := range m.Files {
		switch {
		case strings.HasPrefix(f.Path, DirImages+"/blobs/sha256/"):
			inv.ImageBlobs = append(inv.ImageBlobs, "sha256:"+f.SHA256)
		case strings.HasPrefix(f.Path, DirProviders+"/") && strings.HasSuffix(f.Path, ".zip"):
			inv.ProviderArchives = append(inv.ProviderArchives, "sha256:"+f.SHA256)
		}
	}
	slices.Sort(inv.ImageBlobs)
	slices.Sort(inv.ProviderArchives)
	return inv
}

// ReadInventory reads and checks an inventory file.
func ReadInventory(path string) (Inventory, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Inventory{}, fmt.Errorf("read inventory: %w", err)
	}
	var inv Inventory
	if err := json.Unmarshal(b, &inv); err != nil {
		return Inventory{}, fmt.Errorf("read inventory %s: %w (write one with coder appliance inventory)", path, err)
	}
	if inv.Schema != InventorySchema {
		return Inventory{}, fmt.Errorf("read inventory %s: schema %d, this coder reads %d", path, inv.Schema, InventorySchema)
	}
	if err := inv.Manifest.Validate(); err != nil {
		return Inventory{}, fmt.Errorf("read inventory %s: %w", path, err)
	}
	if inv.Manifest.FilesDigest() != inv.FilesDigest || inv.Manifest.Name != inv.Name || inv.Manifest.Release != inv.Release {
		return Inventory{}, fmt.Errorf("read inventory %s: its manifest does not match its files digest, name or release (edited?)", path)
	}
	return inv, nil
}
