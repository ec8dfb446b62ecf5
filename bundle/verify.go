package bundle

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
)

// maxZstdWindow bounds the decoder's memory on hostile input; Write's
// encoder uses an 8 MiB window at most.
const maxZstdWindow = 64 << 20

// Verify checks a bundle end to end in one streaming pass: the part index
// (split bundles: signature, every part present with its size, every part's
// sha256), the manifest's signature against pub, then every payload member
// against the manifest's size and sha256, in order, and that no member is
// missing and none is extra. It reads everything and writes nothing.
//
// With pub nil the signature is not checked (signed or not), only the
// hashes: the caller says so to the user. With pub set, an unsigned bundle
// is an error.
//
// A failed check is a *VerifyError naming the file or part. progress, when
// set, gets the bytes read so far and the bundle's size.
func Verify(ctx context.Context, path string, pub ed25519.PublicKey, progress func(done, total int64)) error {
	_, _, err := walk(ctx, path, walkOptions{pub: pub, progress: progress})
	return err
}

// walkOptions configure walk.
type walkOptions struct {
	pub           ed25519.PublicKey // nil: do not check signatures
	allowUnsigned bool              // with pub: accept an unsigned bundle
	progress      func(done, total int64)
	// visit, when set, receives every payload file's original bytes. walk
	// checks size and hash after it returns (draining what it left), so
	// whatever visit wrote is trusted only once walk returns nil.
	visit func(f File, r io.Reader) error
}

// walk streams a bundle and checks everything Verify promises, handing each
// payload file to o.visit.
func walk(ctx context.Context, path string, o walkOptions) (_ Manifest, _ Info, err error) {
	l, err := openLayout(path, func(name string, raw, sig []byte) error {
		return checkSignature(raw, sig, o, VerifyError{Part: name})
	})
	if err != nil {
		return Manifest{}, Info{}, err
	}
	if l.index != nil {
		if err := l.statParts(); err != nil {
			return Manifest{}, Info{}, err
		}
	}
	src, pr, err := l.open(true)
	if err != nil {
		return Manifest{}, Info{}, err
	}
	defer src.Close()
	meter := &byteProgress{ctx: ctx, fn: o.progress, total: l.size}
	stream := meter.reader(src)
	var whole hash.Hash
	if l.index != nil {
		// The parts' hashes pin every byte; this also holds the index to
		// its claim about the whole bundle, so that nothing a verified
		// index says is unchecked.
		whole = sha256.New()
		stream = io.TeeReader(stream, whole)
	}
	br := bufio.NewReaderSize(stream, copyBufSize)
	w := &walker{ctx: ctx, pr: pr, meter: meter, tr: tar.NewReader(br), visit: o.visit, buf: make([]byte, copyBufSize)}
	// Runs before src.Close: the part being read is still open to be hashed.
	defer func() {
		if err != nil {
			err = w.attribute(err)
		}
	}()

	h, err := readHead(w.tr)
	if err != nil {
		return Manifest{}, Info{}, w.classify(ManifestMember, err)
	}
	// The signature first: nothing unauthenticated is parsed.
	if err := checkSignature(h.raw, h.sig, o, VerifyError{File: ManifestMember}); err != nil {
		return Manifest{}, Info{}, err
	}
	m, err := h.manifest(l)
	if err != nil {
		return Manifest{}, Info{}, err
	}
	var d *Delta
	if h.deltaRaw != nil {
		if err := checkSignature(h.deltaRaw, h.deltaSig, o, VerifyError{File: DeltaMember}); err != nil {
			return Manifest{}, Info{}, err
		}
		if d, err = h.delta(&m); err != nil {
			return Manifest{}, Info{}, err
		}
	}
	if err := w.files(d.carried(&m), h.next); err != nil {
		return Manifest{}, Info{}, err
	}
	// Only end-of-archive zero blocks may follow; reading to the end also
	// lets the parts reader check the last part's hash.
	for {
		n, err := br.Read(w.buf)
		for _, c := range w.buf[:n] {
			if c != 0 {
				return Manifest{}, Info{}, &VerifyError{Reason: "data after the end of the archive"}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return Manifest{}, Info{}, w.classify("", err)
		}
	}
	if whole != nil {
		if got := hex.EncodeToString(whole.Sum(nil)); got != l.index.BundleSHA256 {
			return Manifest{}, Info{}, &VerifyError{Part: filepath.Base(l.path),
				Reason: fmt.Sprintf("the parts together have sha256 %s, the part index says %s", got, l.index.BundleSHA256)}
		}
	}
	in := l.info(&m)
	in.Delta = d
	return m, in, nil
}

// checkSignature applies o's key policy to a signed document (the manifest
// or the part index) before it is parsed. blame carries the File or Part to
// name in errors. An empty signature is an unsigned document; the parser
// later refuses one whose "signed" says otherwise.
func checkSignature(raw, sig []byte, o walkOptions, blame VerifyError) error {
	if o.pub == nil {
		return nil
	}
	// What the unauthenticated document claims, for messages only.
	var claim struct {
		Signed bool   `json:"signed"`
		KeyID  string `json:"key_id"`
	}
	_ = json.Unmarshal(raw, &claim)
	fail := func(reason string) error {
		blame.Reason = reason
		return &blame
	}
	switch {
	case len(sig) == 0 && claim.Signed:
		if blame.File != "" {
			blame.File = SignatureMember
		}
		return fail(`the signature is empty, but the document says "signed": true (stripped?)`)
	case len(sig) == 0 && o.allowUnsigned:
		return nil
	case len(sig) == 0:
		return fail("the bundle is not signed, but a signature is required")
	case len(sig) == ed25519.SignatureSize && ed25519.Verify(o.pub, raw, sig):
		return nil
	}
	if want := KeyID(o.pub); claim.KeyID != "" && claim.KeyID != want {
		return fail(fmt.Sprintf("signed by key %s, not by the given public key %s", claim.KeyID, want))
	}
	return fail("the signature does not match: changed after it was signed")
}

// walker checks the payload members of one bundle stream.
type walker struct {
	ctx   context.Context
	pr    *partsReader  // nil for an unsplit bundle
	meter *byteProgress // knows whether the stream ended
	tr    *tar.Reader
	dec   *zstd.Decoder
	visit func(File, io.Reader) error
	buf   []byte
}

// files checks the payload members against files, in order. first is the
// first member's header, which readHead has read (nil: the archive ended).
func (w *walker) files(files []File, first *tar.Header) error {
	defer func() {
		if w.dec != nil { // created on the first zstd member
			w.dec.Close()
		}
	}()
	next := func() (*tar.Header, error) {
		if first != nil {
			h := first
			first = nil
			return h, nil
		}
		return w.tr.Next()
	}
	ended := first == nil
	index := make(map[string]int, len(files))
	for i, f := range files {
		index[memberName(f)] = i
	}
	for i, f := range files {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		if ended {
			return &VerifyError{File: f.Path, Reason: "missing: the bundle ends before it"}
		}
		hdr, err := next()
		if err == io.EOF {
			return &VerifyError{File: f.Path, Reason: "missing: the bundle ends before it"}
		}
		if err != nil {
			return w.classify(f.Path, err)
		}
		if want := memberName(f); hdr.Name != want {
			j, known := index[hdr.Name]
			switch {
			case known && j > i:
				return &VerifyError{File: f.Path, Reason: fmt.Sprintf("missing: found %s where it belongs", hdr.Name)}
			case known:
				return &VerifyError{File: hdr.Name, Reason: "member repeated or out of order"}
			}
			return &VerifyError{File: hdr.Name, Reason: fmt.Sprintf("member not in the manifest (found where %s belongs)", want)}
		}
		if hdr.Typeflag != tar.TypeReg {
			reason := fmt.Sprintf("not a regular file (tar type %q)", hdr.Typeflag)
			if hdr.Typeflag == tar.TypeSymlink || hdr.Typeflag == tar.TypeLink {
				reason = fmt.Sprintf("a link to %q, not a regular file", hdr.Linkname)
			}
			return &VerifyError{File: f.Path, Reason: reason}
		}
		if f.Stored == StoredRaw && hdr.Size != f.Size {
			return &VerifyError{File: f.Path, Reason: fmt.Sprintf("size %d, want %d", hdr.Size, f.Size)}
		}
		if f.StoredSHA256 != "" && hdr.Size != f.StoredSize {
			return &VerifyError{File: f.Path, Reason: fmt.Sprintf("stored size %d, want %d", hdr.Size, f.StoredSize)}
		}
		if err := w.file(f); err != nil {
			return err
		}
	}
	if ended {
		return nil
	}
	hdr, err := next()
	if err == nil {
		return &VerifyError{File: hdr.Name, Reason: "member not in the manifest (after the last file)"}
	}
	if err != io.EOF {
		return w.classify("", err)
	}
	return nil
}

// file checks (and visits) the current member's content. Without a
// visitor, a zstd member with a stored digest is checked as stored: every
// byte hashed once, nothing decompressed.
func (w *walker) file(f File) error {
	if w.visit == nil && f.StoredSHA256 != "" {
		return w.check(f.Path, w.tr, f.StoredSize, f.StoredSHA256, "stored ", nil)
	}
	var content io.Reader = w.tr
	if f.Stored == StoredZstd {
		if w.dec == nil {
			dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxWindow(maxZstdWindow))
			if err != nil {
				return fmt.Errorf("bundle: zstd: %w", err)
			}
			w.dec = dec
		}
		if err := w.dec.Reset(w.tr); err != nil {
			return w.classify(f.Path, err)
		}
		content = w.dec
	}
	visit := func(r io.Reader) error { return w.visit(f, r) }
	if w.visit == nil {
		visit = nil
	}
	return w.check(f.Path, content, f.Size, f.SHA256, "", visit)
}

// check hashes r, which must hold size bytes with the given sha256, after
// visit (when set) has read what it wants of them; what says which bytes
// they are in errors ("" for the file's, "stored " for a member's
// compressed bytes).
func (w *walker) check(path string, r io.Reader, size int64, sum, what string, visit func(io.Reader) error) error {
	// One byte more than the manifest says, to notice a longer stream.
	cr := &checkedReader{r: io.LimitReader(r, size+1), h: sha256.New()}
	if visit != nil {
		if err := visit(cr); err != nil {
			if cr.err != nil {
				return w.classify(path, cr.err)
			}
			return fmt.Errorf("bundle: %s: %w", path, err)
		}
	}
	// Hash what visit left (everything, when verifying only).
	for {
		_, err := cr.Read(w.buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			return w.classify(path, err)
		}
	}
	switch {
	case cr.n > size:
		return &VerifyError{File: path, Reason: fmt.Sprintf("longer than the %d %sbytes the manifest says", size, what)}
	case cr.n < size:
		return &VerifyError{File: path, Reason: fmt.Sprintf("%ssize %d, want %d", what, cr.n, size)}
	}
	if got := hex.EncodeToString(cr.h.Sum(nil)); got != sum {
		return &VerifyError{File: path, Reason: fmt.Sprintf("%ssha256 %s, want %s", what, got, sum)}
	}
	return nil
}

// classify turns a read error met while checking file into the error to
// report: a *VerifyError when the data is bad (attribute may then blame its
// part), the error itself when the disk or the context is the problem.
func (w *walker) classify(file string, err error) error {
	var ve *VerifyError
	if errors.As(err, &ve) {
		if ve.File == "" && ve.Part != "" {
			ve.File = file
		}
		return ve
	}
	if ctxErr := w.ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) || errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("bundle: read %s: %w", file, err)
	}
	reason := "corrupt: " + err.Error()
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) && w.meter.eof:
		reason = "the bundle is truncated"
	case errors.Is(err, io.ErrUnexpectedEOF):
		reason = "corrupt: the stored data ends too early"
	case errors.Is(err, tar.ErrHeader):
		reason = "corrupt tar header"
	}
	return &VerifyError{File: file, Reason: reason}
}

// attribute names the bad part of a split bundle as the cause of a failed
// check (a corrupt byte can surface as a bad signature, a bad member name, a
// bad hash…), keeping the file it was noticed in.
func (w *walker) attribute(err error) error {
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.Part != "" {
		return err
	}
	if w.pr == nil {
		return err
	}
	if pe := w.pr.blame(); pe != nil {
		pe.File = ve.File
		return pe
	}
	return err
}

// checkedReader hashes and counts what is read through it and remembers the
// first read error, so a visitor's failure can be told from a bad bundle's.
type checkedReader struct {
	r   io.Reader
	h   hash.Hash
	n   int64
	err error
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}
