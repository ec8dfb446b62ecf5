package bundle_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/bundle"
)

// TestRoundTrip writes a bundle and reads it back every way: Inspect, Verify
// and Extract, which must reproduce every file byte for byte with its mode.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(t, "round trip")
	tests := []struct {
		name   string
		key    ed25519.PrivateKey
		split  int64
		verify ed25519.PublicKey
	}{
		{name: "Signed", key: priv, verify: pub},
		{name: "Unsigned", key: nil, verify: nil},
		{name: "SignedSplit", key: priv, split: 64 << 10, verify: pub},
		{name: "SplitTinyParts", key: priv, split: 1000, verify: pub}, // the manifest spans parts
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			res, files := writeTestBundle(t, tt.key, tt.split)

			m, info, err := bundle.Inspect(res.Path)
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			if got, want := mustJSON(t, m), mustJSON(t, res.Manifest); !bytes.Equal(got, want) {
				t.Errorf("Inspect manifest:\n%s\nwant (as written):\n%s", got, want)
			}
			if info.Signed != (tt.key != nil) || info.TotalSize != res.Size || len(info.Parts) != len(res.Parts) {
				t.Errorf("Inspect info: got %+v, want signed=%v size=%d parts=%d", info, tt.key != nil, res.Size, len(res.Parts))
			}
			if len(m.Files) != len(files) {
				t.Errorf("manifest lists %d files, want %d", len(m.Files), len(files))
			}
			if tt.split > 0 {
				// The plain .bundle name finds the parts beside it.
				plain := strings.TrimSuffix(res.Path, ".part000")
				if _, _, err := bundle.Inspect(plain); err != nil {
					t.Errorf("Inspect(%s) with only parts on disk: %v", filepath.Base(plain), err)
				}
				if err := bundle.Verify(ctx, plain, tt.verify, nil); err != nil {
					t.Errorf("Verify(%s): %v", filepath.Base(plain), err)
				}
			}

			var calls, last int64
			err = bundle.Verify(ctx, res.Path, tt.verify, func(done, total int64) {
				calls++
				if done < last || total != res.Size {
					t.Errorf("progress went from %d to %d of %d (bundle %d)", last, done, total, res.Size)
				}
				last = done
			})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if calls == 0 || last != res.Size {
				t.Errorf("progress: %d calls, last %d, want the bundle size %d", calls, last, res.Size)
			}

			dir := filepath.Join(t.TempDir(), "release")
			em, err := bundle.Extract(ctx, res.Path, dir, tt.verify, tt.key == nil)
			if err != nil {
				t.Fatalf("Extract: %v", err)
			}
			if em.Release != res.Manifest.Release {
				t.Errorf("Extract manifest release %q, want %q", em.Release, res.Manifest.Release)
			}
			checkTree(t, dir, files)
		})
	}
}

// checkTree compares an extracted folder with the payload it came from.
func checkTree(t *testing.T, dir string, files map[string]payloadEntry) {
	t.Helper()
	seen := 0
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if info.IsDir() {
			if info.Mode().Perm() != 0o755 {
				t.Errorf("folder %s: mode %v, want 0755", rel, info.Mode().Perm())
			}
			return nil
		}
		want, ok := files[rel]
		if !ok {
			t.Errorf("extracted %s, which is not in the payload", rel)
			return nil
		}
		seen++
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want.data) {
			t.Errorf("%s: content differs (%d bytes, want %d)", rel, len(got), len(want.data))
		}
		if info.Mode() != want.mode {
			t.Errorf("%s: mode %v, want %v", rel, info.Mode(), want.mode)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(files) {
		t.Errorf("extracted %d files, want %d", seen, len(files))
	}
}

// TestInspectPartsMissing: Inspect of a split bundle needs only the part
// index and the first part.
func TestInspectPartsMissing(t *testing.T) {
	t.Parallel()
	_, priv := testKey(t, "inspect")
	res, _ := writeTestBundle(t, priv, 64<<10)
	for _, p := range res.Parts[1:] {
		os.Remove(filepath.Join(filepath.Dir(res.Path), p.Name))
	}
	m, info, err := bundle.Inspect(res.Path)
	if err != nil {
		t.Fatalf("Inspect with only .part000 and .part001: %v", err)
	}
	if m.Name != "acme-coder" || len(info.Parts) != len(res.Parts) {
		t.Errorf("Inspect: %s, %d parts; want acme-coder, %d parts", m.Name, len(info.Parts), len(res.Parts))
	}
	if _, _, err := bundle.Inspect(filepath.Join(filepath.Dir(res.Path), res.Parts[0].Name)); err == nil || !strings.Contains(err.Error(), "part000") {
		t.Errorf("Inspect of a data part: got %v, want a pointer to the .part000", err)
	}
}
