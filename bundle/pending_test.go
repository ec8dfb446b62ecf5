package bundle_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/bundle"
)

// pendingLayers takes testPayload's gzip layer and two more out of the
// payload folder and offers them as PendingBlobs whose Wait returns a
// file elsewhere, released by release (nil: at once). It returns the
// pending blobs and a channel that receives each path Write waits for.
func pendingLayers(t *testing.T, files map[string]payloadEntry, release map[string]chan struct{}) ([]bundle.PendingBlob, <-chan string) {
	t.Helper()
	for i := range 2 {
		layer := gzipped(t, compressible(200_000+i, uint64(60+i)))
		files["images/blobs/sha256/"+sum(layer)] = payloadEntry{layer, 0o644}
	}
	elsewhere := t.TempDir()
	waits := make(chan string, 3)
	var pending []bundle.PendingBlob
	for p, e := range files {
		if !strings.HasPrefix(p, "images/blobs/") || e.data[0] != 0x1f {
			continue
		}
		file := filepath.Join(elsewhere, filepath.Base(p))
		if err := os.WriteFile(file, e.data, 0o600); err != nil {
			t.Fatal(err)
		}
		ch := release[p]
		pending = append(pending, bundle.PendingBlob{Path: p, Size: int64(len(e.data)), Wait: func(ctx context.Context) (string, error) {
			waits <- p
			if ch != nil {
				select {
				case <-ch:
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			return file, nil
		}})
	}
	if len(pending) != 3 {
		t.Fatalf("test payload has %d gzip layers, want 3", len(pending))
	}
	return pending, waits
}

// withoutPending is files but the pending blobs: the payload folder's part.
func withoutPending(files map[string]payloadEntry, pending []bundle.PendingBlob) map[string]payloadEntry {
	rest := maps.Clone(files)
	for _, pb := range pending {
		delete(rest, pb.Path)
	}
	return rest
}

// TestWritePending: blobs still downloading when Write starts give the
// same bundle, byte for byte, as the same blobs in the payload folder;
// Write waits for each only when the stream reaches it, in stream order.
func TestWritePending(t *testing.T) {
	t.Parallel()
	_, priv := testKey(t, "pending")
	files := testPayload(t)
	pending, waits := pendingLayers(t, files, nil)
	marked := markedPath(files)
	compressed := func(p string) bool { return p == marked }

	want, err := bundle.Write(context.Background(), bundle.WriteOptions{
		PayloadDir: makePayload(t, files), OutputDir: t.TempDir(), Manifest: testManifest(files), Key: priv, Compressed: compressed,
	})
	if err != nil {
		t.Fatal(err)
	}
	rest := withoutPending(files, pending)
	got, err := bundle.Write(context.Background(), bundle.WriteOptions{
		PayloadDir: makePayload(t, rest), OutputDir: t.TempDir(), Manifest: testManifest(files), Key: priv, Compressed: compressed,
		Pending: pending,
	})
	if err != nil {
		t.Fatal(err)
	}
	wb, _ := os.ReadFile(want.Path)
	gb, _ := os.ReadFile(got.Path)
	if !bytes.Equal(wb, gb) || got.SHA256 != want.SHA256 {
		t.Fatalf("the bundle with pending blobs (sha256 %s) differs from the one with them in the payload folder (%s)", got.SHA256, want.SHA256)
	}
	var sorted []string
	for _, f := range want.Manifest.Files {
		for _, pb := range pending {
			if pb.Path == f.Path {
				sorted = append(sorted, f.Path)
			}
		}
	}
	var order []string
	for len(waits) > 0 {
		order = append(order, <-waits)
	}
	if strings.Join(order, " ") != strings.Join(sorted, " ") {
		t.Errorf("Write waited for %v, want the stream's order %v", order, sorted)
	}
	if err := bundle.Verify(context.Background(), got.Path, priv.Public().(ed25519.PublicKey), nil); err != nil {
		t.Errorf("Verify: %v", err)
	}

	// Split into parts, the same stream.
	split, err := bundle.Write(context.Background(), bundle.WriteOptions{
		PayloadDir: makePayload(t, rest), OutputDir: t.TempDir(), Manifest: testManifest(files), Key: priv, Compressed: compressed,
		Pending: pending, Split: 100_000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(split.Parts) < 2 || split.SHA256 != want.SHA256 {
		t.Errorf("split with pending blobs: %d parts, stream sha256 %s; want several, %s", len(split.Parts), split.SHA256, want.SHA256)
	}
	if err := bundle.Verify(context.Background(), split.Path, priv.Public().(ed25519.PublicKey), nil); err != nil {
		t.Errorf("Verify of the split bundle: %v", err)
	}
}

// TestWritePendingFails: a download that fails, a file of another size,
// and pending blobs Write cannot take all fail the write with what is
// wrong, and leave nothing in the output folder.
func TestWritePendingFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(files map[string]payloadEntry, pending []bundle.PendingBlob) []bundle.PendingBlob
		want string
	}{
		{"download fails", func(_ map[string]payloadEntry, pending []bundle.PendingBlob) []bundle.PendingBlob {
			pending[1].Wait = func(context.Context) (string, error) { return "", errors.New("registry said 503") }
			return pending
		}, ": registry said 503"},
		{"other size", func(_ map[string]payloadEntry, pending []bundle.PendingBlob) []bundle.PendingBlob {
			pending[2].Size--
			return pending
		}, " does not hold the bytes its name (a sha256 digest) says"},
		{"not a blob", func(_ map[string]payloadEntry, pending []bundle.PendingBlob) []bundle.PendingBlob {
			pending[0].Path = "images/layer.tar.gz"
			return pending
		}, "pending file images/layer.tar.gz is not an OCI blob path"},
		{"also in the folder", func(files map[string]payloadEntry, pending []bundle.PendingBlob) []bundle.PendingBlob {
			for p, e := range files {
				if strings.HasPrefix(p, "images/blobs/") && e.data[0] != 0x1f {
					pending[0].Path = p
				}
			}
			return pending
		}, "is listed twice or also in the payload folder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			files := testPayload(t)
			pending, _ := pendingLayers(t, files, nil)
			rest := withoutPending(files, pending)
			pending = tc.edit(rest, pending)
			out := t.TempDir()
			writeFails(t, bundle.WriteOptions{
				PayloadDir: makePayload(t, rest), OutputDir: out, Manifest: testManifest(files), Pending: pending,
			}, out, tc.want)
		})
	}
}

// TestWritePendingCancelled: Write that waits for a blob stops when its
// context ends, and leaves nothing.
func TestWritePendingCancelled(t *testing.T) {
	t.Parallel()
	files := testPayload(t)
	never := map[string]chan struct{}{}
	for p, e := range files {
		if strings.HasPrefix(p, "images/blobs/") && e.data[0] == 0x1f {
			never[p] = make(chan struct{})
		}
	}
	pending, waits := pendingLayers(t, files, never)
	rest := withoutPending(files, pending)
	ctx, cancel := context.WithCancel(context.Background())
	out := t.TempDir()
	errc := make(chan error, 1)
	go func() {
		_, err := bundle.Write(ctx, bundle.WriteOptions{PayloadDir: makePayload(t, rest), OutputDir: out, Manifest: testManifest(files), Pending: pending})
		errc <- err
	}()
	<-waits // Write has written what comes before the first pending blob
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if got := dirContents(t, out); len(got) != 0 {
		t.Errorf("a cancelled Write left %v", got)
	}
}

// TestWriteWithoutMaps: where payload files cannot be mapped, Write reads
// them, and the bundle is the same, byte for byte, pending blobs included.
// Not parallel: it switches maps off for the package.
func TestWriteWithoutMaps(t *testing.T) {
	files := testPayload(t)
	pending, waits := pendingLayers(t, files, nil)
	marked := markedPath(files)
	opts := func() bundle.WriteOptions {
		return bundle.WriteOptions{
			PayloadDir: makePayload(t, withoutPending(files, pending)), OutputDir: t.TempDir(), Manifest: testManifest(files),
			Compressed: func(p string) bool { return p == marked }, Pending: pending,
		}
	}
	mapped, err := bundle.Write(context.Background(), opts())
	if err != nil {
		t.Fatal(err)
	}
	for range pending {
		<-waits // each Write waits once for each
	}
	restore := bundle.ReadPayloadFiles()
	read, err := bundle.Write(context.Background(), opts())
	restore()
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := os.ReadFile(mapped.Path)
	rb, _ := os.ReadFile(read.Path)
	if !bytes.Equal(mb, rb) || len(mb) == 0 {
		t.Fatalf("the bundle written by reading files (sha256 %s) differs from the one written from maps (%s)", read.SHA256, mapped.SHA256)
	}
}
