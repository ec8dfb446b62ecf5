package bundle

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"airgapcoder/internal/atomicfile"
	"airgapcoder/internal/buildinfo"
)

// WriteOptions say what Write packs and where.
type WriteOptions struct {
	// PayloadDir is the folder whose regular files become the payload, in
	// the layout of the package documentation. Symlinks, devices and other
	// special files are an error; empty folders are not carried.
	PayloadDir string
	// OutputDir receives <name>-<release>.bundle (or its parts) and
	// <name>-<release>.bundle.sha256. It must exist and lie outside PayloadDir.
	OutputDir string
	// Manifest is the caller's part of the manifest: Name, Release,
	// Platforms, Components; BuildTime (zero: SOURCE_DATE_EPOCH, else now)
	// and ToolVersion (empty: this binary's). Write computes Files and sets
	// Schema, Signed and KeyID.
	Manifest Manifest
	// Key signs the manifest (and part index); nil writes an unsigned bundle.
	Key ed25519.PrivateKey
	// Split is the part size in bytes; 0 writes one file.
	Split int64
	// Compressed marks payload paths whose content is already compressed
	// (e.g. OCI layers by media type) so they are stored raw; nil: decide by
	// name suffix and magic bytes only.
	Compressed func(path string) bool
	// Pending are payload files that are not in PayloadDir because their
	// bytes may still be arriving (see PendingBlob).
	Pending []PendingBlob
	// Progress, when set, is called as payload bytes are read. Every byte is
	// read twice (hashed for the manifest, then written), so total is twice
	// the payload size.
	Progress func(done, total int64)
	// Base, when set, makes a delta bundle against that installed release
	// (see Delta): the manifest is the full one, the payload only the files
	// whose bytes Base lacks. The file is DeltaFileName.
	Base *Manifest
}

// PendingBlob is a payload file that a builder is still downloading when it
// calls Write: an OCI blob (images/blobs/sha256/<hex>) that is already
// compressed and so stored raw. Its name and Size are all the manifest needs,
// so Write writes the manifest and every file before it in the stream while
// the download runs, and calls Wait when the stream reaches it.
//
// Wait returns the file that holds the blob, once it does, or why it never
// will. It must return only a file whose bytes the caller hashed against
// the digest its name says and that nothing writes any more: Write does not
// hash it again (it checks its size). The file is read, not moved: it may
// lie anywhere, such as in a download cache.
type PendingBlob struct {
	Path string
	Size int64
	Wait func(ctx context.Context) (file string, err error)
}

// Result describes a written bundle.
type Result struct {
	// Path is what Inspect, Verify and Extract take: the .bundle, or the
	// .part000 of a split bundle.
	Path string
	// Files are every file written, in the order they were committed.
	Files []string
	// Parts are the data parts of a split bundle; nil otherwise.
	Parts []Part
	// Size and SHA256 describe the bundle's byte stream (the parts concatenated).
	Size   int64
	SHA256 string
	// Manifest is the manifest as written.
	Manifest Manifest
	// Delta is what a delta bundle omits; nil for a full bundle.
	Delta *Delta
}

// zstdLevel is fixed: changing it changes every bundle's bytes.
const zstdLevel = zstd.SpeedDefault

// copyBufSize is the I/O buffer size for payload streams.
const copyBufSize = 1 << 20

// memSpoolMax is the largest file compressed in memory; larger ones spool
// through a temporary file in the output folder.
const memSpoolMax = 16 << 20

// DefaultBuildTime returns the time a bundle built now should carry:
// SOURCE_DATE_EPOCH (seconds since 1970, UTC) when environ sets it to a
// non-empty value, else the clock, truncated to whole seconds. environ is in
// the form of os.Environ ("KEY=value"); nil means the process's environment.
// It is the one place a bundle's build time is read from the environment:
// Write uses it when the manifest has no BuildTime, and so does the builder.
func DefaultBuildTime(environ []string) (time.Time, error) {
	if environ == nil {
		environ = os.Environ()
	}
	var s string
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "SOURCE_DATE_EPOCH="); ok {
			s = v // the first one counts, as with os.Getenv
			break
		}
	}
	if s == "" {
		return time.Now().UTC().Truncate(time.Second), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("bundle: SOURCE_DATE_EPOCH=%q is not a whole number of seconds since 1970: set it to one (such as the last commit's time, git log -1 --format=%%ct) or unset it to use the clock", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// payloadFile is one file found in PayloadDir.
type payloadFile struct {
	File
	abs string
	// named: the first pass took SHA256 from the file's name (an OCI blob
	// stored raw) instead of reading it; the write pass checks it.
	named bool
	// wait, for a PendingBlob, gives abs when the stream reaches the file;
	// its caller checked its digest.
	wait func(ctx context.Context) (string, error)
}

// Write packs opts.PayloadDir into a bundle in opts.OutputDir. Everything is
// written under temporary names and renamed into place once complete (data
// parts first, then the part index, then the .sha256 file), so a failed or
// cancelled Write leaves no partial bundle behind. The same payload, manifest
// and key give the same bytes. A payload file that changes while Write runs
// is an error.
//
// Write replaces an earlier build with the same name, but refuses when it
// would leave files of another shape beside the new one (a .bundle next to
// parts, or stale parts after the last new one).
func Write(ctx context.Context, opts WriteOptions) (Result, error) {
	m, files, prog, err := prepareWrite(ctx, &opts)
	if err != nil {
		return Result{}, err
	}
	raw, err := marshalManifest(&m)
	if err != nil {
		return Result{}, fmt.Errorf("bundle: encode manifest: %w", err)
	}
	var sig []byte
	if opts.Key != nil {
		sig = ed25519.Sign(opts.Key, raw)
	}
	base := opts.fileName(m.Release)
	var delta *Delta
	var deltaRaw, deltaSig []byte
	if opts.Base != nil {
		delta = planDelta(&m, opts.Base)
		if deltaRaw, err = json.MarshalIndent(delta, "", "  "); err != nil {
			return Result{}, fmt.Errorf("bundle: encode delta: %w", err)
		}
		deltaRaw = append(deltaRaw, '\n')
		if opts.Key != nil {
			deltaSig = ed25519.Sign(opts.Key, deltaRaw)
		}
		carried := carriedFiles(files, delta.carried(&m))
		for _, f := range files {
			prog.total -= f.Size // not written: only hashed
		}
		for _, f := range carried {
			prog.total += f.Size
		}
		files = carried
	}
	sink := &fileSink{dir: opts.OutputDir, base: base, limit: opts.Split}
	committed := false
	defer func() {
		if !committed {
			sink.abort()
		}
	}()
	size, sum, err := writeStream(ctx, opts.OutputDir, prog, sink, &m, [][2][]byte{{raw, sig}, {deltaRaw, deltaSig}}, files)
	if err != nil {
		return Result{}, err
	}
	if err := sink.finish(); err != nil {
		return Result{}, fmt.Errorf("bundle: write %s: %w", base, err)
	}
	res := Result{Size: size, SHA256: sum, Manifest: m, Delta: delta, Path: filepath.Join(opts.OutputDir, base)}
	sums := fmt.Sprintf("%s  %s\n", sum, base)
	if opts.Split > 0 {
		if res.Path, sums, err = addPartIndex(&opts, sink, &m, size, sum); err != nil {
			return Result{}, err
		}
		res.Parts = sink.parts
	}
	sumsTmp, err := writeTempFile(opts.OutputDir, base+".sha256", []byte(sums))
	if err != nil {
		return Result{}, err
	}
	sink.files = append(sink.files, pendingFile{tmp: sumsTmp, final: filepath.Join(opts.OutputDir, base+".sha256")})

	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	pending := sink.files
	for i, p := range pending {
		if err := os.Rename(p.tmp, p.final); err != nil {
			// Files renamed so far are complete; abort removes the rest.
			sink.files = pending[i:]
			return Result{}, fmt.Errorf("bundle: commit %s: %w", p.final, err)
		}
		res.Files = append(res.Files, p.final)
	}
	committed = true
	if err := atomicfile.SyncDir(opts.OutputDir); err != nil {
		return Result{}, fmt.Errorf("bundle: sync %s: %w", opts.OutputDir, err)
	}
	return res, nil
}

// addPartIndex writes the signed part index of a split bundle (to be
// committed after the parts) and returns its final path and the lines of the
// .sha256 file.
func addPartIndex(opts *WriteOptions, sink *fileSink, m *Manifest, size int64, sum string) (string, string, error) {
	base := sink.base
	if err := checkStale(opts.OutputDir, base, opts.Split, len(sink.parts)); err != nil {
		return "", "", err
	}
	index := PartIndex{
		Schema: SchemaVersion, Name: m.Name, Release: m.Release, Signed: m.Signed, KeyID: m.KeyID,
		BundleSize: size, BundleSHA256: sum, Parts: sink.parts,
	}
	tmp, indexSum, err := writePartIndex(opts.OutputDir, base, &index, m.BuildTime, opts.Key)
	if err != nil {
		return "", "", err
	}
	final := filepath.Join(opts.OutputDir, PartName(base, 0))
	sink.files = append(sink.files, pendingFile{tmp: tmp, final: final})
	var sums strings.Builder
	fmt.Fprintf(&sums, "%s  %s\n", indexSum, PartName(base, 0))
	for _, p := range sink.parts {
		fmt.Fprintf(&sums, "%s  %s\n", p.SHA256, p.Name)
	}
	return final, sums.String(), nil
}

// prepareWrite checks the options, scans and hashes the payload, and completes the
// manifest. The progress it returns continues in the write pass.
func prepareWrite(ctx context.Context, opts *WriteOptions) (Manifest, []payloadFile, *byteProgress, error) {
	m := opts.Manifest
	if opts.PayloadDir == "" || opts.OutputDir == "" {
		return Manifest{}, nil, nil, errors.New("bundle: PayloadDir and OutputDir are required")
	}
	if opts.Split < 0 {
		return Manifest{}, nil, nil, fmt.Errorf("bundle: split size %d is negative", opts.Split)
	}
	if err := validName("name", m.Name); err != nil {
		return Manifest{}, nil, nil, fmt.Errorf("bundle: %w", err)
	}
	if err := validName("release", m.Release); err != nil {
		return Manifest{}, nil, nil, fmt.Errorf("bundle: %w", err)
	}
	payload, err := filepath.Abs(opts.PayloadDir)
	if err != nil {
		return Manifest{}, nil, nil, fmt.Errorf("bundle: %w", err)
	}
	out, err := filepath.Abs(opts.OutputDir)
	if err != nil {
		return Manifest{}, nil, nil, fmt.Errorf("bundle: %w", err)
	}
	if st, err := os.Stat(out); err != nil || !st.IsDir() {
		return Manifest{}, nil, nil, fmt.Errorf("bundle: output folder %s does not exist", opts.OutputDir)
	}
	if out == payload || strings.HasPrefix(out, payload+string(filepath.Separator)) {
		return Manifest{}, nil, nil, fmt.Errorf("bundle: output folder %s is inside the payload folder %s", opts.OutputDir, opts.PayloadDir)
	}
	// Before the long hashing pass: refuse early what would be refused later.
	if err := checkStale(opts.OutputDir, opts.fileName(m.Release), opts.Split, -1); err != nil {
		return Manifest{}, nil, nil, err
	}

	m.Schema = SchemaVersion
	if m.BuildTime.IsZero() {
		if m.BuildTime, err = DefaultBuildTime(nil); err != nil {
			return Manifest{}, nil, nil, err
		}
	}
	m.BuildTime = m.BuildTime.UTC().Truncate(time.Second)
	if m.ToolVersion == "" {
		m.ToolVersion = buildinfo.Version()
	}
	m.Signed, m.KeyID = false, ""
	if opts.Key != nil {
		if len(opts.Key) != ed25519.PrivateKeySize {
			return Manifest{}, nil, nil, errors.New("bundle: signing key is not an ed25519 private key")
		}
		m.Signed, m.KeyID = true, KeyID(opts.Key.Public().(ed25519.PublicKey))
	}

	files, err := scanPayload(payload)
	if err != nil {
		return Manifest{}, nil, nil, err
	}
	if files, err = addPending(files, opts.Pending); err != nil {
		return Manifest{}, nil, nil, err
	}
	var total int64
	for _, f := range files {
		total += 2 * f.Size
	}
	prog := &byteProgress{ctx: ctx, fn: opts.Progress, total: total}
	if err := hashPayload(files, prog, opts.Compressed); err != nil {
		return Manifest{}, nil, nil, err
	}
	m.Files = make([]File, len(files))
	for i, f := range files {
		m.Files[i] = f.File
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, nil, nil, err
	}
	return m, files, prog, nil
}

// scanPayload lists the regular files under dir, sorted by path.
func scanPayload(dir string) ([]payloadFile, error) {
	var files []payloadFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			if !d.IsDir() {
				return fmt.Errorf("%s is not a folder", dir)
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch t := d.Type(); {
		case t.IsDir():
			return nil
		case t&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symlink: a payload holds regular files only", rel)
		case !t.IsRegular():
			return fmt.Errorf("%s is not a regular file (%s)", rel, t)
		}
		if err := ValidPath(rel); err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := uint32(0o644)
		if info.Mode().Perm()&0o111 != 0 {
			mode = 0o755
		}
		files = append(files, payloadFile{File: File{Path: rel, Size: info.Size(), Mode: mode}, abs: p})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bundle: payload: %w", err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// addPending adds the pending blobs to the files found in the payload folder
// and sorts them by path again.
func addPending(files []payloadFile, pending []PendingBlob) ([]payloadFile, error) {
	if len(pending) == 0 {
		return files, nil
	}
	have := make(map[string]bool, len(files)+len(pending))
	for _, f := range files {
		have[f.Path] = true
	}
	for _, p := range pending {
		sum, ok := blobDigestName(p.Path)
		switch {
		case !ok:
			return nil, fmt.Errorf("bundle: pending file %s is not an OCI blob path (%s/blobs/sha256/<hex>)", p.Path, DirImages)
		case p.Size <= 0 || p.Wait == nil:
			return nil, fmt.Errorf("bundle: pending blob %s has no size or no Wait", p.Path)
		case have[p.Path]:
			return nil, fmt.Errorf("bundle: pending blob %s is listed twice or also in the payload folder", p.Path)
		}
		have[p.Path] = true
		files = append(files, payloadFile{
			File:  File{Path: p.Path, Size: p.Size, Mode: 0o644, SHA256: sum, Stored: StoredRaw},
			named: true, wait: p.Wait,
		})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// hashPayload fills in every file's size, sha256 and storage.
func hashPayload(files []payloadFile, prog *byteProgress, compressed func(string) bool) error {
	buf := make([]byte, copyBufSize)
	enc, err := newZstdEncoder()
	if err != nil {
		return err
	}
	defer enc.Close()
	paths := make(map[string]bool, len(files))
	for _, f := range files {
		paths[f.Path] = true
	}
	for i := range files {
		f := &files[i]
		if f.wait != nil { // named and checked by the caller
			prog.add(f.Size)
			continue
		}
		r, err := os.Open(f.abs)
		if err != nil {
			return fmt.Errorf("bundle: payload: %w", err)
		}
		h := sha256.New()
		var head [8]byte
		n, err := io.ReadFull(r, head[:])
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			r.Close()
			return fmt.Errorf("bundle: payload: read %s: %w", f.Path, err)
		}
		// Store raw what is already compressed, what is empty, and what
		// would collide with another file's member name.
		rawByName := hasCompressedSuffix(f.Path) || hasCompressedMagic(head[:n]) ||
			(compressed != nil && compressed(f.Path)) || paths[f.Path+ZstdSuffix]
		if sum, ok := blobDigestName(f.Path); ok && rawByName && n > 0 {
			// An OCI blob is named by its sha256: the write pass hashes it
			// anyway and fails if the name lied, so this pass need not.
			st, err := r.Stat()
			r.Close()
			if err != nil {
				return fmt.Errorf("bundle: payload: %w", err)
			}
			f.Size, f.SHA256, f.Stored, f.named = st.Size(), sum, StoredRaw, true
			prog.add(st.Size())
			continue
		}
		h.Write(head[:n])
		rest, err := io.CopyBuffer(h, prog.reader(r), buf)
		r.Close()
		if err != nil {
			return fmt.Errorf("bundle: payload: read %s: %w", f.Path, err)
		}
		prog.add(int64(n))
		f.Size = int64(n) + rest
		f.SHA256 = hex.EncodeToString(h.Sum(nil))
		raw := f.Size == 0 || rawByName
		f.Stored = StoredZstd
		if raw {
			f.Stored = StoredRaw
			continue
		}
		if err := hashCompressed(f, enc, buf); err != nil {
			return err
		}
	}
	return nil
}

// hashCompressed compresses f into a hash to learn its stored size and
// sha256 before the manifest is written (compression is deterministic:
// writePayloadFile produces the same bytes and checks that it did).
func hashCompressed(f *payloadFile, enc *zstd.Encoder, buf []byte) error {
	r, err := os.Open(f.abs)
	if err != nil {
		return fmt.Errorf("bundle: payload: %w", err)
	}
	defer r.Close()
	h := sha256.New()
	cw := &countWriter{w: h}
	enc.Reset(cw)
	if _, err := io.CopyBuffer(enc, io.LimitReader(r, f.Size), buf); err != nil {
		return fmt.Errorf("bundle: compress %s: %w", f.Path, err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("bundle: compress %s: %w", f.Path, err)
	}
	f.StoredSize = cw.n
	f.StoredSHA256 = hex.EncodeToString(h.Sum(nil))
	return nil
}

// newZstdEncoder returns the bundle's encoder; its settings are part of
// the format (they fix every bundle's bytes).
func newZstdEncoder() (*zstd.Encoder, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstdLevel), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(true), zstd.WithZeroFrames(true))
	if err != nil {
		return nil, fmt.Errorf("bundle: zstd: %w", err)
	}
	return enc, nil
}

// fileName is the bundle's file name: FileName, or DeltaFileName for a
// delta.
func (o *WriteOptions) fileName(release string) string {
	if o.Base != nil {
		return DeltaFileName(o.Manifest.Name, release, o.Base.Release)
	}
	return FileName(o.Manifest.Name, release)
}

// carriedFiles keeps the payload files of keep, in order.
func carriedFiles(files []payloadFile, keep []File) []payloadFile {
	want := make(map[string]bool, len(keep))
	for _, f := range keep {
		want[f.Path] = true
	}
	var out []payloadFile
	for _, f := range files {
		if want[f.Path] {
			out = append(out, f)
		}
	}
	return out
}

// writeStream writes the bundle tar to w and returns its size and sha256.
// head holds the signed documents, each with its signature: the manifest,
// then (for a delta bundle; nil otherwise) the delta.
func writeStream(ctx context.Context, outDir string, prog *byteProgress, w io.Writer, m *Manifest, head [][2][]byte, files []payloadFile) (int64, string, error) {
	out := &streamOut{sink: w, h: newHashBehind()}
	defer out.h.close()
	// Small enough that the payload's copyBufSize chunks mostly pass
	// through to out without being copied into it: it gathers the headers.
	bw := bufio.NewWriterSize(out, copyBufSize/16)
	st := &tarStream{bw: bw, to: &switchWriter{w: bw}, out: out}
	st.tw = tar.NewWriter(st.to)
	mtime := m.BuildTime
	names := [][2]string{{ManifestMember, SignatureMember}, {DeltaMember, DeltaSigMember}}
	for i, doc := range head {
		if doc[0] == nil {
			continue
		}
		if err := writeMember(st.tw, names[i][0], doc[0], mtime); err != nil {
			return 0, "", err
		}
		if err := writeMember(st.tw, names[i][1], doc[1], mtime); err != nil {
			return 0, "", err
		}
	}
	enc, err := newZstdEncoder()
	if err != nil {
		return 0, "", err
	}
	defer enc.Close()
	sp := &zstdSpool{dir: outDir}
	defer sp.close()
	buf := make([]byte, copyBufSize)
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return 0, "", err
		}
		if err := writePayloadFile(ctx, st, f, mtime, enc, sp, prog, buf); err != nil {
			return 0, "", err
		}
	}
	if err := st.tw.Close(); err != nil {
		return 0, "", fmt.Errorf("bundle: write: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return 0, "", fmt.Errorf("bundle: write: %w", err)
	}
	sum, err := out.h.Sum()
	if err != nil {
		return 0, "", fmt.Errorf("bundle: write: %w", err)
	}
	return out.n, sum, nil
}

// tarStream is the bundle's byte stream as writeStream makes it: the tar
// writer on top, then a buffer that gathers headers and small members, then
// out. A member written from a mapped file bypasses the buffer (to) and
// lends its bytes to the stream's hash.
type tarStream struct {
	tw  *tar.Writer
	to  *switchWriter // what tw writes to: bw, or out lending
	bw  *bufio.Writer
	out *streamOut
}

// streamOut is the bottom of the stream: every byte goes to the sink and to
// the stream's hash, and is counted.
type streamOut struct {
	sink io.Writer
	h    *hashBehind
	n    int64
}

func (s *streamOut) Write(p []byte) (int, error) { return s.write(p, false) }

// write writes p to the sink and to the hash, lending it (no copy) when p
// stays put until the hash is done.
func (s *streamOut) write(p []byte, lend bool) (int, error) {
	n, err := s.sink.Write(p)
	if lend {
		s.h.lend(p[:n])
	} else {
		s.h.Write(p[:n])
	}
	s.n += int64(n)
	return n, err
}

// lending writes to out bytes that stay put until the hash is done.
type lending struct{ out *streamOut }

func (l lending) Write(p []byte) (int, error) { return l.out.write(p, true) }

type switchWriter struct{ w io.Writer }

func (s *switchWriter) Write(p []byte) (int, error) { return s.w.Write(p) }

// writeMapped writes a member stored raw from a map of its file r: the
// bytes go to the sink and are lent to the stream's hash and to the
// member's own, never copied in between. A pending blob is not hashed on its
// own (see PendingBlob). It returns false, having written nothing, when r
// cannot be mapped.
func (st *tarStream) writeMapped(f payloadFile, r *os.File, mtime time.Time, prog *byteProgress) (bool, error) {
	if fi, err := r.Stat(); err != nil {
		return true, fmt.Errorf("bundle: payload: %w", err)
	} else if fi.Size() != f.Size {
		return true, errWrongBytes(f)
	}
	if !mapFiles {
		return false, nil
	}
	data, unmap := mapFile(r, f.Size)
	if data == nil {
		return false, nil
	}
	var member *hashBehind
	if f.wait == nil {
		member = newHashBehind()
		defer member.close()
		unmap = releaseAfter(2, unmap) // both hashes
	}
	name := memberName(f.File)
	err := st.writeLent(name, f, data, mtime, prog, member)
	st.out.h.then(unmap) // once the hashes have read the pages
	if member != nil {
		member.then(unmap)
	}
	if err != nil {
		return true, err
	}
	if member != nil {
		sum, err := member.Sum()
		if err != nil {
			return true, fmt.Errorf("bundle: payload file %s: %w", f.Path, err)
		}
		fi, err := r.Stat()
		if err != nil {
			return true, fmt.Errorf("bundle: payload: %w", err)
		}
		if sum != f.SHA256 || fi.Size() != f.Size {
			return true, errWrongBytes(f)
		}
	}
	return true, nil
}

// mapFiles is turned off by tests of the read path, which writeMapped
// takes where files cannot be mapped.
var mapFiles = true

// writeLent writes member name, data, lending data to the stream's hash
// and, when it is set, to member. A split bundle's sink hashes what it
// writes (each part's digest): data cut short under its map makes that
// fault, which is an error, not a crash.
func (st *tarStream) writeLent(name string, f payloadFile, data []byte, mtime time.Time, prog *byteProgress, member *hashBehind) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if ferr := faultError(recover()); ferr != nil {
			err = fmt.Errorf("bundle: write %s: %w", name, ferr)
		}
	}()
	if err := st.tw.WriteHeader(tarHeader(name, f.Size, f.Mode, mtime)); err != nil {
		return fmt.Errorf("bundle: write %s: %w", name, err)
	}
	if err := st.bw.Flush(); err != nil {
		return fmt.Errorf("bundle: write %s: %w", name, err)
	}
	st.to.w = lending{st.out}
	defer func() { st.to.w = st.bw }()
	for rest := data; len(rest) > 0; {
		if err := prog.ctx.Err(); err != nil {
			return err
		}
		n := min(len(rest), copyBufSize)
		if _, err := st.tw.Write(rest[:n]); err != nil {
			return fmt.Errorf("bundle: write %s: %w", name, err)
		}
		if member != nil {
			member.lend(rest[:n])
		}
		prog.add(int64(n))
		rest = rest[n:]
	}
	return nil
}

// releaseAfter returns a function that calls release on its nth call.
func releaseAfter(n int32, release func()) func() {
	var left atomic.Int32
	left.Store(n)
	return func() {
		if left.Add(-1) == 0 {
			release()
		}
	}
}

// errWrongBytes says that f did not hold, when written, what the manifest
// records.
func errWrongBytes(f payloadFile) error {
	if f.named {
		return fmt.Errorf("bundle: payload file %s does not hold the bytes its name (a sha256 digest) says", f.Path)
	}
	return fmt.Errorf("bundle: payload file %s changed while the bundle was written", f.Path)
}

func tarHeader(name string, size int64, mode uint32, mtime time.Time) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: int64(mode), ModTime: mtime}
}

func writeMember(tw *tar.Writer, name string, data []byte, mtime time.Time) error {
	if err := tw.WriteHeader(tarHeader(name, int64(len(data)), 0o644, mtime)); err != nil {
		return fmt.Errorf("bundle: write %s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("bundle: write %s: %w", name, err)
	}
	return nil
}

// writePayloadFile writes f's member, checking that the file still has the
// size and hash the manifest recorded.
func writePayloadFile(ctx context.Context, st *tarStream, f payloadFile, mtime time.Time, enc *zstd.Encoder, sp *zstdSpool, prog *byteProgress, buf []byte) error {
	if f.wait != nil {
		abs, err := f.wait(ctx)
		if err != nil {
			return fmt.Errorf("bundle: %s: %w", f.Path, err)
		}
		f.abs = abs
	}
	r, err := os.Open(f.abs)
	if err != nil {
		return fmt.Errorf("bundle: payload: %w", err)
	}
	defer r.Close()
	if f.Stored == StoredRaw {
		if mapped, err := st.writeMapped(f, r, mtime, prog); mapped || err != nil {
			return err
		}
	}
	tw := st.tw
	src := io.LimitReader(prog.reader(r), f.Size)
	sum := func() (string, error) { return f.SHA256, nil } // a pending blob's, checked by the caller
	if f.wait == nil {
		h := newHashBehind()
		defer h.close()
		src, sum = io.TeeReader(src, h), h.Sum
	}
	name := memberName(f.File)
	var n int64
	switch f.Stored {
	case StoredRaw:
		if err := tw.WriteHeader(tarHeader(name, f.Size, f.Mode, mtime)); err != nil {
			return fmt.Errorf("bundle: write %s: %w", name, err)
		}
		if n, err = io.CopyBuffer(tw, src, buf); err != nil {
			return fmt.Errorf("bundle: write %s: %w", name, err)
		}
	case StoredZstd:
		dst, err := sp.reset(f.Size)
		if err != nil {
			return fmt.Errorf("bundle: compress %s: %w", f.Path, err)
		}
		enc.Reset(dst)
		if n, err = io.CopyBuffer(enc, src, buf); err != nil {
			return fmt.Errorf("bundle: compress %s: %w", f.Path, err)
		}
		if err := enc.Close(); err != nil {
			return fmt.Errorf("bundle: compress %s: %w", f.Path, err)
		}
		stored, size, err := sp.contents()
		if err != nil {
			return fmt.Errorf("bundle: compress %s: %w", f.Path, err)
		}
		if size != f.StoredSize {
			return fmt.Errorf("bundle: payload file %s compressed to %d bytes, %d a moment before", f.Path, size, f.StoredSize)
		}
		if err := tw.WriteHeader(tarHeader(name, size, f.Mode, mtime)); err != nil {
			return fmt.Errorf("bundle: write %s: %w", name, err)
		}
		sh := sha256.New()
		if _, err := io.CopyBuffer(tw, io.TeeReader(stored, sh), buf); err != nil {
			return fmt.Errorf("bundle: write %s: %w", name, err)
		}
		if hex.EncodeToString(sh.Sum(nil)) != f.StoredSHA256 {
			return fmt.Errorf("bundle: payload file %s compressed to other bytes than a moment before", f.Path)
		}
	}
	var extra [1]byte
	got, err := sum()
	if err != nil {
		return fmt.Errorf("bundle: payload file %s: %w", f.Path, err)
	}
	if k, _ := r.Read(extra[:]); n != f.Size || k != 0 || got != f.SHA256 {
		return errWrongBytes(f)
	}
	return nil
}

// blobDigestName returns the sha256 an OCI layout blob path names
// (images/blobs/sha256/<64 hex>).
func blobDigestName(p string) (string, bool) {
	sum, ok := strings.CutPrefix(p, DirImages+"/blobs/sha256/")
	if !ok || len(sum) != 64 {
		return "", false
	}
	for _, c := range sum {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return sum, true
}

// zstdSpool holds one compressed file until its size is known (a tar header
// comes before the data): in memory when small, else in a temporary file.
type zstdSpool struct {
	dir    string
	mem    bytes.Buffer
	f      *os.File
	inFile bool
}

func (s *zstdSpool) reset(size int64) (io.Writer, error) {
	s.mem.Reset()
	s.inFile = size > memSpoolMax
	if !s.inFile {
		return &s.mem, nil
	}
	if s.f == nil {
		f, err := os.CreateTemp(s.dir, ".bundle-spool-*.tmp")
		if err != nil {
			return nil, err
		}
		s.f = f
	}
	if err := s.f.Truncate(0); err != nil {
		return nil, err
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return s.f, nil
}

func (s *zstdSpool) contents() (io.Reader, int64, error) {
	if !s.inFile {
		return &s.mem, int64(s.mem.Len()), nil
	}
	size, err := s.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, 0, err
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, err
	}
	return io.LimitReader(s.f, size), size, nil
}

func (s *zstdSpool) close() {
	if s.f != nil {
		s.f.Close()
		os.Remove(s.f.Name())
	}
}

// writePartIndex writes part000 under a temporary name and returns that name
// and its sha256.
func writePartIndex(dir, base string, index *PartIndex, mtime time.Time, key ed25519.PrivateKey) (string, string, error) {
	raw, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return "", "", fmt.Errorf("bundle: encode part index: %w", err)
	}
	raw = append(raw, '\n')
	var sig []byte
	if key != nil {
		sig = ed25519.Sign(key, raw)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := writeMember(tw, PartsMember, raw, mtime); err != nil {
		return "", "", err
	}
	if err := writeMember(tw, PartsSigMember, sig, mtime); err != nil {
		return "", "", err
	}
	if err := tw.Close(); err != nil {
		return "", "", err
	}
	tmp, err := writeTempFile(dir, PartName(base, 0), b.Bytes())
	if err != nil {
		return "", "", err
	}
	sum := sha256.Sum256(b.Bytes())
	return tmp, hex.EncodeToString(sum[:]), nil
}

// writeTemp writes data to a new temporary file beside final's name.
func writeTempFile(dir, final string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, "."+final+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("bundle: write %s: %w", final, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("bundle: write %s: %w", final, err)
	}
	return f.Name(), nil
}

// checkStale refuses to write next to files of another shape: a .bundle
// beside parts, parts beside a .bundle, or (parts >= 0, once the number of
// parts is known) stale parts after the last one.
func checkStale(dir, base string, split int64, parts int) error {
	exists := func(name string) bool {
		_, err := os.Lstat(filepath.Join(dir, name))
		return err == nil
	}
	if split == 0 && exists(PartName(base, 0)) {
		return fmt.Errorf("bundle: %s already holds a split bundle %s: remove its parts or write elsewhere", dir, PartName(base, 0))
	}
	if split > 0 && exists(base) {
		return fmt.Errorf("bundle: %s already holds the unsplit bundle %s: remove it or write elsewhere", dir, base)
	}
	if parts < 0 {
		return nil
	}
	matches, _ := filepath.Glob(filepath.Join(dir, globEscape(base)+".part[0-9][0-9][0-9]"))
	var stale []string
	for _, p := range matches {
		n, _ := strconv.Atoi(p[len(p)-3:])
		if n > parts {
			stale = append(stale, filepath.Base(p))
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("bundle: %s holds parts of an earlier build that the new one would not replace (%s): remove them or write elsewhere", dir, strings.Join(stale, ", "))
	}
	return nil
}

// globEscape escapes a file name for filepath.Glob.
func globEscape(s string) string {
	r := strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`)
	return r.Replace(s)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// byteProgress counts bytes read, reports them, and stops reads once ctx ends.
type byteProgress struct {
	ctx         context.Context
	fn          func(done, total int64)
	done, total int64
	eof         bool // a reader reached the end of its input
}

func (p *byteProgress) add(n int64) {
	p.done += n
	if p.fn != nil {
		p.fn(p.done, p.total)
	}
}

func (p *byteProgress) reader(r io.Reader) io.Reader { return &progressReader{r: r, p: p} }

type progressReader struct {
	r io.Reader
	p *byteProgress
}

func (r *progressReader) Read(b []byte) (int, error) {
	if err := r.p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.r.Read(b)
	r.p.add(int64(n))
	if err == io.EOF {
		r.p.eof = true
	}
	return n, err
}
