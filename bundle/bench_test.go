package bundle_test

import (
	"context"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"airgapcoder/bundle"
)

// BenchmarkVerify runs Verify and `sha256sum` over the same bundle file in
// the same iterations and reports their ratio (verify/sha256sum: 1.0 means
// Verify costs what merely hashing the file once costs). verify/go-sha256
// compares with the floor: crypto/sha256 over the file in this process (no
// tar, no decompression, no signature). The bundle holds
// 256 MiB of payload:
//
//   - Raw: 4 × 64 MiB of incompressible, already-compressed files (stored raw),
//     like provider zips, image layers and PostgreSQL archives;
//   - Mixed: 3 × 64 MiB raw and one 64 MiB binary-like file stored as zstd, so
//     Verify also decompresses, like a bundle with coder and terraform.
//
// Both read the file from the page cache (it was just written), so this
// compares CPU cost. Run it with:
//
//	go test ./bundle/ -run '^$' -bench BenchmarkVerify -benchtime 5x
func BenchmarkVerify(b *testing.B) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		b.Skip("no sha256sum")
	}
	pub, priv := testKey(b, "bench")
	const chunk = 64 << 20
	for _, bc := range []struct {
		name  string
		files map[string]func() []byte
	}{
		{name: "Raw", files: map[string]func() []byte{
			"images/blobs/sha256/layer1.gz": func() []byte { return random(chunk, 1) },
			"images/blobs/sha256/layer2.gz": func() []byte { return random(chunk, 2) },
			"postgres/pg.txz":               func() []byte { return random(chunk, 3) },
			"providers/p/p.zip":             func() []byte { return random(chunk, 4) },
		}},
		{name: "Mixed", files: map[string]func() []byte{
			"images/blobs/sha256/layer1.gz": func() []byte { return random(chunk, 1) },
			"postgres/pg.txz":               func() []byte { return random(chunk, 3) },
			"providers/p/p.zip":             func() []byte { return random(chunk, 4) },
			"bin/coder-linux-amd64":         func() []byte { return binaryLike(chunk) },
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			payload := b.TempDir()
			for p, gen := range bc.files {
				full := filepath.Join(payload, filepath.FromSlash(p))
				os.MkdirAll(filepath.Dir(full), 0o755)
				if err := os.WriteFile(full, gen(), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			res, err := bundle.Write(context.Background(), bundle.WriteOptions{
				PayloadDir: payload, OutputDir: b.TempDir(), Key: priv,
				Manifest: bundle.Manifest{Name: "bench", Release: "1", BuildTime: time.Unix(1e9, 0)},
			})
			if err != nil {
				b.Fatal(err)
			}
			os.RemoveAll(payload)
			var verify, sha, floor time.Duration
			for b.Loop() {
				start := time.Now()
				if err := bundle.Verify(context.Background(), res.Path, pub, nil); err != nil {
					b.Fatal(err)
				}
				verify += time.Since(start)
				start = time.Now()
				if out, err := exec.Command("sha256sum", res.Path).CombinedOutput(); err != nil {
					b.Fatalf("sha256sum: %v\n%s", err, out)
				}
				sha += time.Since(start)
				start = time.Now()
				if err := hashFile(res.Path); err != nil {
					b.Fatal(err)
				}
				floor += time.Since(start)
			}
			n := float64(b.N)
			mib := float64(res.Size) / (1 << 20)
			b.ReportMetric(verify.Seconds()/sha.Seconds(), "verify/sha256sum")
			b.ReportMetric(verify.Seconds()/floor.Seconds(), "verify/go-sha256")
			b.ReportMetric(mib/(verify.Seconds()/n), "verify-MiB/s")
			b.ReportMetric(mib/(sha.Seconds()/n), "sha256sum-MiB/s")
			b.ReportMetric(mib, "bundle-MiB")
		})
	}
}

// hashFile is the floor for Verify: crypto/sha256 over the file, nothing else.
func hashFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyBuffer(sha256.New(), f, make([]byte, 1<<20))
	return err
}

// binaryLike is n bytes that compress about as well as a Go binary (2-3×):
// random runs mixed with repeated ones.
func binaryLike(n int) []byte {
	src := random(n/2, 11)
	out := make([]byte, 0, n)
	for i := 0; len(out) < n; i++ {
		block := src[(i*4096)%(len(src)-4096):][:4096]
		if i%2 == 1 {
			block = src[(i*4096%65536)%(len(src)-4096):][:4096] // a repeat
		}
		out = append(out, block...)
	}
	return out[:n]
}

// BenchmarkDeltaInstall extracts release B twice in the same iterations:
// from its full bundle, and from a delta bundle against release A (A
// unpacked beside it), and reports delta/full (issue 17's goal: assembling
// takes no longer than installing the full bundle, ≤ 1.0). B changes only
// the coder binary of a 320 MiB payload (a 64 MiB binary stored as zstd,
// 4 × 64 MiB stored raw), so the delta reads the new binary from the
// bundle and copies the rest from A, checking every file's sha256 either
// way.
//
//	go test ./bundle/ -run '^$' -bench DeltaInstall -benchtime 3x
func BenchmarkDeltaInstall(b *testing.B) {
	ctx := context.Background()
	pub, priv := testKey(b, "bench")
	const chunk = 64 << 20
	release := func(name string, coder []byte) bundle.Result {
		payload := b.TempDir()
		files := map[string][]byte{
			"images/blobs/sha256/layer1.gz": random(chunk, 1),
			"images/blobs/sha256/layer2.gz": random(chunk, 2),
			"postgres/pg.txz":               random(chunk, 3),
			"providers/p/p.zip":             random(chunk, 4),
			"bin/coder-linux-amd64":         coder,
		}
		for p, data := range files {
			full := filepath.Join(payload, filepath.FromSlash(p))
			os.MkdirAll(filepath.Dir(full), 0o755)
			if err := os.WriteFile(full, data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		res, err := bundle.Write(ctx, bundle.WriteOptions{PayloadDir: payload, OutputDir: b.TempDir(), Key: priv,
			Manifest: bundle.Manifest{Name: "bench", Release: name, BuildTime: time.Unix(1e9, 0)}})
		if err != nil {
			b.Fatal(err)
		}
		return res
	}
	a := release("1", binaryLike(chunk))
	base := filepath.Join(b.TempDir(), "a")
	if _, err := bundle.Extract(ctx, a.Path, base, pub, false); err != nil {
		b.Fatal(err)
	}
	newCoder := append(binaryLike(chunk), "release 2"...)
	full := release("2", newCoder)
	payload := b.TempDir()
	// The delta of the same payload against A.
	for p, data := range map[string][]byte{
		"images/blobs/sha256/layer1.gz": random(chunk, 1), "images/blobs/sha256/layer2.gz": random(chunk, 2),
		"postgres/pg.txz": random(chunk, 3), "providers/p/p.zip": random(chunk, 4), "bin/coder-linux-amd64": newCoder,
	} {
		full := filepath.Join(payload, filepath.FromSlash(p))
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	delta, err := bundle.Write(ctx, bundle.WriteOptions{PayloadDir: payload, OutputDir: b.TempDir(), Key: priv, Base: &a.Manifest,
		Manifest: bundle.Manifest{Name: "bench", Release: "2", BuildTime: time.Unix(1e9, 0)}})
	if err != nil {
		b.Fatal(err)
	}
	var fullTime, deltaTime time.Duration
	for b.Loop() {
		dir := b.TempDir()
		start := time.Now()
		if _, err := bundle.Extract(ctx, full.Path, filepath.Join(dir, "full"), pub, false); err != nil {
			b.Fatal(err)
		}
		fullTime += time.Since(start)
		start = time.Now()
		if _, err := bundle.ExtractWith(ctx, delta.Path, filepath.Join(dir, "delta"), bundle.ExtractOptions{PublicKey: pub, BaseDir: base}); err != nil {
			b.Fatal(err)
		}
		deltaTime += time.Since(start)
		os.RemoveAll(dir)
	}
	b.ReportMetric(float64(full.Size)/(1<<20), "full-MiB")
	b.ReportMetric(float64(delta.Size)/(1<<20), "delta-MiB")
	b.ReportMetric(fullTime.Seconds()/float64(b.N), "full-s/op")
	b.ReportMetric(deltaTime.Seconds()/float64(b.N), "delta-s/op")
	b.ReportMetric(deltaTime.Seconds()/fullTime.Seconds(), "delta/full")
	for _, f := range full.Manifest.Files {
		if f.Path == "bin/coder-linux-amd64" {
			b.ReportMetric(float64(delta.Size)/float64(f.StoredSize), "delta/binary")
		}
	}
}
