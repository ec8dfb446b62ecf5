package bundle

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// maxIndexSize bounds a part index file (999 parts take about 150 KiB).
const maxIndexSize = 1 << 20

// Info describes a bundle file as it was found on disk.
type Info struct {
	// Path is the file that was read: the .bundle, or the .part000.
	Path string `json:"path"`
	// Signed says the manifest claims a signature; Inspect does not check it.
	Signed bool `json:"signed"`
	// KeyID is the signing key the manifest names ("" when unsigned).
	KeyID string `json:"key_id,omitempty"`
	// TotalSize is the size of the bundle's byte stream (all parts).
	TotalSize int64 `json:"total_size"`
	// Parts are the data parts of a split bundle; nil otherwise.
	Parts []Part `json:"parts,omitempty"`
	// Delta says what a delta bundle leaves to its base; nil for a full
	// bundle.
	Delta *Delta `json:"delta,omitempty"`
}

// layout is where a bundle's bytes are: one file, or a part index and parts.
type layout struct {
	path     string // the .bundle, or the .part000
	dir      string // folder of path: parts are found here
	size     int64  // bytes of the bundle stream
	index    *PartIndex
	indexRaw []byte // parts.json as signed
	indexSig []byte
}

var dataPart = regexp.MustCompile(`^(.*)\.part([0-9]{3})$`)

// openLayout resolves path: a .bundle file, a .part000, or a .bundle name
// whose .part000 exists beside it. For a split bundle, checkIndex (when set)
// gets the part index's name, raw bytes and signature before they are parsed.
func openLayout(path string, checkIndex func(name string, raw, sig []byte) error) (*layout, error) {
	if m := dataPart.FindStringSubmatch(path); m != nil && m[2] != "000" {
		return nil, fmt.Errorf("bundle: %s is one part of a split bundle: pass its part index %s", path, PartName(m[1], 0))
	}
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) && !strings.HasSuffix(path, ".part000") {
		if _, err2 := os.Stat(PartName(path, 0)); err2 == nil {
			path = PartName(path, 0)
			st, err = os.Stat(path)
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && strings.HasSuffix(path, ".part000") {
			return nil, fmt.Errorf("bundle: no part index at %s", path)
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("bundle: no bundle at %s (nor a split bundle %s)", path, PartName(path, 0))
		}
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("bundle: %s is not a regular file", path)
	}
	l := &layout{path: path, dir: filepath.Dir(path), size: st.Size()}
	if strings.HasSuffix(path, ".part000") {
		if err := l.readIndex(checkIndex); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// readIndex reads the part index, hands it to check (when set), then parses
// and checks it.
func (l *layout) readIndex(check func(name string, raw, sig []byte) error) error {
	name := filepath.Base(l.path)
	bad := func(reason string) error { return &VerifyError{Part: name, Reason: reason} }
	f, err := os.Open(l.path)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(io.LimitReader(f, maxIndexSize))
	raw, err := readMember(tr, PartsMember, maxIndexSize)
	if err != nil {
		return bad("not a part index: " + err.Error())
	}
	sig, err := readMember(tr, PartsSigMember, ed25519.SignatureSize)
	if err != nil {
		return bad("not a part index: " + err.Error())
	}
	if _, err := tr.Next(); err != io.EOF {
		return bad("not a part index: unexpected data after " + PartsSigMember)
	}
	if check != nil {
		if err := check(name, raw, sig); err != nil {
			return err
		}
	}
	var x PartIndex
	if err := decodeStrict(raw, &x); err != nil {
		return bad("not a part index: " + err.Error())
	}
	if err := x.validate(); err != nil {
		return bad(err.Error())
	}
	if err := checkSigLength(x.Signed, sig); err != nil {
		return bad(err.Error())
	}
	l.index, l.indexRaw, l.indexSig = &x, raw, sig
	l.size = x.BundleSize
	return nil
}

// open returns the bundle's byte stream; for a split bundle also its
// partsReader (nil otherwise), which checks part hashes when check is set.
func (l *layout) open(check bool) (io.ReadCloser, *partsReader, error) {
	if l.index == nil {
		f, err := os.Open(l.path)
		if err != nil {
			return nil, nil, fmt.Errorf("bundle: %w", err)
		}
		return f, nil, nil
	}
	pr := &partsReader{dir: l.dir, parts: l.index.Parts, check: check}
	return pr, pr, nil
}

// statParts checks that every part exists with its listed size, so a missing
// or truncated part is named before anything is read.
func (l *layout) statParts() error {
	for _, p := range l.index.Parts {
		st, err := os.Stat(filepath.Join(l.dir, p.Name))
		if err != nil {
			return partOpenError(p.Name, err)
		}
		if st.Size() != p.Size {
			return &VerifyError{Part: p.Name, Reason: fmt.Sprintf("size %d, want %d (incomplete copy?)", st.Size(), p.Size)}
		}
	}
	return nil
}

func (l *layout) info(m *Manifest) Info {
	in := Info{Path: l.path, Signed: m.Signed, KeyID: m.KeyID, TotalSize: l.size}
	if l.index != nil {
		in.Parts = l.index.Parts
	}
	return in
}

// readMember reads the next tar member, which must be a regular file called
// name of at most max bytes.
func readMember(tr *tar.Reader, name string, max int64) ([]byte, error) {
	hdr, err := tr.Next()
	if err == io.EOF {
		return nil, fmt.Errorf("no %s member", name)
	}
	if err != nil {
		return nil, err
	}
	if hdr.Name != name {
		return nil, fmt.Errorf("member %q where %s belongs", hdr.Name, name)
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	if hdr.Size > max {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d allowed", name, hdr.Size, max)
	}
	// Memory grows with the bytes that arrive, not with the size the header
	// claims: a cut-off or hostile file of a few KiB must not cost 64 MiB.
	b := bytes.NewBuffer(make([]byte, 0, min(hdr.Size, 64<<10)))
	if _, err := b.ReadFrom(io.LimitReader(tr, hdr.Size)); err != nil {
		return nil, err
	}
	if int64(b.Len()) != hdr.Size {
		return nil, io.ErrUnexpectedEOF
	}
	return b.Bytes(), nil
}

func checkSigLength(signed bool, sig []byte) error {
	switch {
	case signed && len(sig) == 0:
		return errors.New(`says "signed": true, but the signature is empty (stripped?)`)
	case signed && len(sig) != ed25519.SignatureSize:
		return fmt.Errorf("the signature is %d bytes, want %d", len(sig), ed25519.SignatureSize)
	case !signed && len(sig) != 0:
		return errors.New(`says "signed": false, but a signature is present`)
	}
	return nil
}

// head is the bundle's signed documents, as read: the manifest and, in a
// delta bundle, the delta, each with its signature.
type head struct {
	raw, sig           []byte
	deltaRaw, deltaSig []byte // nil for a full bundle
	// next is the header after them (the first payload member's), already
	// read; nil at the end of the archive.
	next *tar.Header
}

// readHead reads manifest.json and manifest.sig, delta.json and delta.sig
// when they follow, and the header of the member after them.
func readHead(tr *tar.Reader) (*head, error) {
	raw, err := readMember(tr, ManifestMember, maxManifestSize)
	if err != nil {
		return nil, headError(ManifestMember, err)
	}
	sig, err := readMember(tr, SignatureMember, ed25519.SignatureSize)
	if err != nil {
		return nil, headError(SignatureMember, err)
	}
	h := &head{raw: raw, sig: sig}
	hdr, err := tr.Next()
	switch {
	case err == io.EOF:
		return h, nil
	case err != nil:
		return nil, headError(DeltaMember, err)
	case hdr.Name != DeltaMember:
		h.next = hdr
		return h, nil
	}
	if hdr.Typeflag != tar.TypeReg || hdr.Size > maxDeltaSize {
		return nil, &VerifyError{File: DeltaMember, Reason: "not a regular file of at most 64 MiB"}
	}
	if h.deltaRaw, err = io.ReadAll(io.LimitReader(tr, hdr.Size)); err != nil || int64(len(h.deltaRaw)) != hdr.Size {
		return nil, headError(DeltaMember, cmpErr(err, io.ErrUnexpectedEOF))
	}
	if h.deltaSig, err = readMember(tr, DeltaSigMember, ed25519.SignatureSize); err != nil {
		return nil, headError(DeltaSigMember, err)
	}
	if h.next, err = tr.Next(); err != nil && err != io.EOF {
		return nil, headError(DeltaSigMember, err)
	}
	return h, nil
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// delta parses the delta of a delta bundle (nil for a full one) and checks
// that its signature's presence matches the manifest's.
func (h *head) delta(m *Manifest) (*Delta, error) {
	if h.deltaRaw == nil {
		return nil, nil
	}
	if err := checkSigLength(m.Signed, h.deltaSig); err != nil {
		return nil, &VerifyError{File: DeltaSigMember, Reason: "the delta " + strings.Replace(err.Error(), "says", "belongs to a manifest that says", 1)}
	}
	return parseDelta(h.deltaRaw, m)
}

// manifest parses and checks the manifest, that the signature's presence
// matches its "signed" (not the signature itself), and that it is the
// manifest l's part index is for (when l is a split bundle).
func (h *head) manifest(l *layout) (Manifest, error) {
	m, err := parseManifest(h.raw)
	if err != nil {
		return Manifest{}, err
	}
	if err := checkSigLength(m.Signed, h.sig); err != nil {
		return Manifest{}, &VerifyError{File: SignatureMember, Reason: "the manifest " + err.Error()}
	}
	if err := l.checkMatchesIndex(&m); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

func headError(member string, err error) error {
	var ve *VerifyError
	var pathErr *fs.PathError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &pathErr):
		return fmt.Errorf("bundle: read %s: %w", member, err)
	case errors.As(err, &ve):
		return ve
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &VerifyError{File: member, Reason: "the bundle is truncated"}
	case errors.Is(err, tar.ErrHeader):
		return &VerifyError{File: member, Reason: "not a bundle: not a tar file"}
	}
	return &VerifyError{File: member, Reason: "not a bundle: " + err.Error()}
}

// checkMatchesIndex ties a split bundle's manifest to its part index.
func (l *layout) checkMatchesIndex(m *Manifest) error {
	if l.index == nil {
		return nil
	}
	x := l.index
	if x.Name != m.Name || x.Release != m.Release || x.Signed != m.Signed || x.KeyID != m.KeyID {
		return &VerifyError{Part: filepath.Base(l.path), Reason: fmt.Sprintf("the part index is for %s %s, the manifest for %s %s", x.Name, x.Release, m.Name, m.Release)}
	}
	return nil
}

// Inspect reads a bundle's manifest without reading its payload: only the
// first two tar members (for a split bundle: the part index and the start of
// the first part), so it is instant on a multi-GiB bundle. It checks the
// manifest's form but NOT its signature or any hash: use Verify to trust a
// bundle.
func Inspect(path string) (Manifest, Info, error) {
	return inspect(path, nil)
}

// inspect is Inspect; wrap, when set, wraps the bundle stream (tests count
// the bytes read through it).
func inspect(path string, wrap func(io.Reader) io.Reader) (Manifest, Info, error) {
	l, err := openLayout(path, nil)
	if err != nil {
		return Manifest{}, Info{}, err
	}
	src, _, err := l.open(false)
	if err != nil {
		return Manifest{}, Info{}, err
	}
	defer src.Close()
	var r io.Reader = src
	if wrap != nil {
		r = wrap(r)
	}
	// No read-ahead buffer: the tar reader reads the signed documents'
	// headers and blocks, and the first payload member's header, nothing
	// more.
	h, err := readHead(tar.NewReader(r))
	if err != nil {
		return Manifest{}, Info{}, err
	}
	m, err := h.manifest(l)
	if err != nil {
		return Manifest{}, Info{}, err
	}
	d, err := h.delta(&m)
	if err != nil {
		return Manifest{}, Info{}, err
	}
	in := l.info(&m)
	in.Delta = d
	return m, in, nil
}
