package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// maxParts bounds a split bundle: part names have three digits.
const maxParts = 999

// PartIndex is parts.json, the signed list of a split bundle's parts.
type PartIndex struct {
	// Schema is SchemaVersion.
	Schema int `json:"schema"`
	// Name and Release are the bundle's, as in its manifest.
	Name    string `json:"name"`
	Release string `json:"release"`
	// Signed and KeyID mean what they mean in the Manifest.
	Signed bool   `json:"signed"`
	KeyID  string `json:"key_id,omitempty"`
	// BundleSize and BundleSHA256 describe the whole bundle: the parts
	// concatenated, byte for byte the unsplit bundle.
	BundleSize   int64  `json:"bundle_size"`
	BundleSHA256 string `json:"bundle_sha256"`
	// Parts are the data parts in order (.part001 first).
	Parts []Part `json:"parts"`
}

// Part is one part file of a split bundle.
type Part struct {
	// Name is the part's file name, in the part index's folder.
	Name string `json:"name"`
	// Size is the part's size in bytes.
	Size int64 `json:"size"`
	// SHA256 is the lower-case hex sha256 of the part.
	SHA256 string `json:"sha256"`
}

// PartName is the file name of part n (0 = the part index) of the bundle
// file called bundle.
func PartName(bundle string, n int) string { return fmt.Sprintf("%s.part%03d", bundle, n) }

func (x *PartIndex) validate() error {
	if x.Schema != SchemaVersion {
		return fmt.Errorf("schema %d, want %d", x.Schema, SchemaVersion)
	}
	if err := validName("name", x.Name); err != nil {
		return err
	}
	if err := validName("release", x.Release); err != nil {
		return err
	}
	if x.Signed != (x.KeyID != "") {
		return errors.New("key_id must be set exactly when signed is true")
	}
	if len(x.Parts) == 0 || len(x.Parts) > maxParts {
		return fmt.Errorf("%d parts, want 1 to %d", len(x.Parts), maxParts)
	}
	if !validSHA256(x.BundleSHA256) {
		return fmt.Errorf("bundle_sha256 %q is not 64 lower-case hex digits", x.BundleSHA256)
	}
	seen := map[string]bool{}
	var total int64
	for _, p := range x.Parts {
		if err := validName("part name", p.Name); err != nil {
			return err
		}
		if seen[p.Name] {
			return fmt.Errorf("part %s is listed twice", p.Name)
		}
		seen[p.Name] = true
		if p.Size <= 0 {
			return fmt.Errorf("part %s: size %d", p.Name, p.Size)
		}
		if !validSHA256(p.SHA256) {
			return fmt.Errorf("part %s: sha256 %q is not 64 lower-case hex digits", p.Name, p.SHA256)
		}
		if total > math.MaxInt64-p.Size {
			return errors.New("part sizes overflow")
		}
		total += p.Size
	}
	if total != x.BundleSize {
		return fmt.Errorf("parts add up to %d bytes, bundle_size is %d", total, x.BundleSize)
	}
	return nil
}

// ParseSize parses a part size: plain bytes ("1048576"), or a whole number
// with a unit (B, KB, MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB in
// powers of 1024; case-insensitive), optionally followed by +N or -N bytes:
// "4GiB-1" is the largest file FAT32 holds.
func ParseSize(s string) (int64, error) {
	orig := s
	s = strings.TrimSpace(s)
	var adjust int64
	if i := strings.LastIndexAny(s, "+-"); i > 0 {
		n, err := strconv.ParseInt(strings.TrimSpace(s[i+1:]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("size %q: %q is not a number of bytes", orig, s[i+1:])
		}
		if s[i] == '-' {
			n = -n
		}
		adjust, s = n, strings.TrimSpace(s[:i])
	}
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want a whole number with an optional unit, like 100MiB or 4GiB-1", orig)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", orig, err)
	}
	units := map[string]int64{
		"": 1, "b": 1,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	}
	mult, ok := units[strings.ToLower(strings.TrimSpace(s[i:]))]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", orig, s[i:])
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", orig)
	}
	n *= mult
	if adjust > 0 && n > math.MaxInt64-adjust {
		return 0, fmt.Errorf("size %q is too large", orig)
	}
	n += adjust
	if n <= 0 {
		return 0, fmt.Errorf("size %q is not positive", orig)
	}
	return n, nil
}

// pendingFile is a file written under a temporary name, renamed at commit.
type pendingFile struct {
	tmp, final string
}

// fileSink receives the bundle's byte stream and writes it to one temporary
// file (limit 0) or to temporary part files of limit bytes each.
type fileSink struct {
	dir, base string // output folder, bundle file name
	limit     int64

	cur   *os.File
	wb    *writeBehind // streams cur to disk as it grows
	n     int64
	h     hash.Hash
	files []pendingFile
	parts []Part
}

func (s *fileSink) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if s.cur == nil {
			if err := s.open(); err != nil {
				return written, err
			}
		}
		chunk := p
		if s.limit > 0 && int64(len(chunk)) > s.limit-s.n {
			chunk = chunk[:s.limit-s.n]
		}
		n, err := s.cur.Write(chunk)
		if s.h != nil {
			s.h.Write(chunk[:n])
		}
		s.n += int64(n)
		s.wb.wrote(s.n)
		written += n
		if err != nil {
			return written, err
		}
		p = p[n:]
		if s.limit > 0 && s.n == s.limit {
			if err := s.closePart(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (s *fileSink) open() error {
	final := s.base
	if s.limit > 0 {
		if len(s.parts) == maxParts {
			return fmt.Errorf("the bundle needs more than %d parts of %d bytes: choose a larger split size", maxParts, s.limit)
		}
		final = PartName(s.base, len(s.parts)+1)
	}
	f, err := os.CreateTemp(s.dir, "."+final+".*.tmp")
	if err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	s.cur, s.wb, s.n = f, newWriteBehind(f), 0
	if s.limit > 0 {
		// A part's own digest (the part index); one file's is the
		// stream's, which writeStream computes.
		s.h = sha256.New()
	}
	s.files = append(s.files, pendingFile{tmp: f.Name(), final: filepath.Join(s.dir, final)})
	return nil
}

func (s *fileSink) closePart() error {
	f := s.cur
	s.cur = nil
	s.wb.stop()
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if s.h != nil {
		s.parts = append(s.parts, Part{
			Name:   filepath.Base(s.files[len(s.files)-1].final),
			Size:   s.n,
			SHA256: hex.EncodeToString(s.h.Sum(nil)),
		})
	}
	return nil
}

// finish closes the last file.
func (s *fileSink) finish() error {
	if s.cur == nil {
		if len(s.files) == 0 { // nothing was written: cannot happen for a tar
			return errors.New("empty bundle")
		}
		return nil
	}
	return s.closePart()
}

// abort closes and removes every temporary file.
func (s *fileSink) abort() {
	if s.cur != nil {
		s.wb.stop()
		s.cur.Close()
		s.cur = nil
	}
	for _, f := range s.files {
		os.Remove(f.tmp)
	}
}

// partsReader reads a split bundle's parts in order as one stream. With check
// set, it hashes every part and fails the read that crosses a part's end when
// the part does not match its index entry; it never reads past a part's
// listed size.
type partsReader struct {
	dir   string
	parts []Part
	check bool

	i   int      // current part
	f   *os.File // open current part, nil between parts
	n   int64    // bytes read from the current part
	h   hash.Hash
	err error // sticky
}

func (r *partsReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	for {
		if r.i == len(r.parts) {
			return 0, io.EOF
		}
		part := r.parts[r.i]
		if r.f == nil {
			f, err := os.Open(filepath.Join(r.dir, part.Name))
			if err != nil {
				r.err = partOpenError(part.Name, err)
				return 0, r.err
			}
			r.f, r.n = f, 0
			if r.check {
				r.h = sha256.New()
			}
		}
		if r.n == part.Size {
			if err := r.endPart(); err != nil {
				r.err = err
				return 0, err
			}
			continue
		}
		if int64(len(p)) > part.Size-r.n {
			p = p[:part.Size-r.n]
		}
		n, err := r.f.Read(p)
		r.n += int64(n)
		if r.check {
			r.h.Write(p[:n])
		}
		if err == io.EOF && r.n < part.Size {
			r.err = &VerifyError{Part: part.Name, Reason: fmt.Sprintf("truncated: %d bytes, want %d", r.n, part.Size)}
			return n, r.err
		}
		if err != nil && err != io.EOF {
			r.err = fmt.Errorf("read part %s: %w", part.Name, err)
			return n, r.err
		}
		if n > 0 {
			return n, nil
		}
	}
}

// endPart closes the current part, which has been read to its listed size,
// and checks its hash.
func (r *partsReader) endPart() error {
	part := r.parts[r.i]
	r.f.Close()
	r.f = nil
	r.i++
	if r.check {
		if got := hex.EncodeToString(r.h.Sum(nil)); got != part.SHA256 {
			return &VerifyError{Part: part.Name, Reason: fmt.Sprintf("sha256 %s, want %s (the part is corrupt: copy it again)", got, part.SHA256)}
		}
	}
	return nil
}

// blame finishes hashing the part being read when a content check failed
// inside it, and returns the part's error when the part itself is bad: a
// corrupt part is named even when a member check noticed first.
func (r *partsReader) blame() *VerifyError {
	var ve *VerifyError
	if errors.As(r.err, &ve) { // a part already failed; the reader saw its bytes first
		return ve
	}
	if !r.check || r.f == nil {
		return nil
	}
	part := r.parts[r.i]
	n, err := io.Copy(r.h, io.LimitReader(r.f, part.Size-r.n))
	r.n += n
	if err != nil {
		return nil
	}
	if r.n < part.Size {
		return &VerifyError{Part: part.Name, Reason: fmt.Sprintf("truncated: %d bytes, want %d", r.n, part.Size)}
	}
	if errors.As(r.endPart(), &ve) {
		r.err = ve
		return ve
	}
	return nil
}

func (r *partsReader) Close() error {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	return nil
}

func partOpenError(name string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return &VerifyError{Part: name, Reason: "missing"}
	}
	return fmt.Errorf("open part %s: %w", name, err)
}
