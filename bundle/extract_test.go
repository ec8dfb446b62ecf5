package bundle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/bundle"
)

func TestExtractRefusesNonEmptyDir(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(t, "nonempty")
	res, _ := writeTestBundle(t, priv, 0)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("mine"), 0o644)
	_, err := bundle.Extract(context.Background(), res.Path, dir, pub, false)
	if !errors.Is(err, bundle.ErrNotEmpty) {
		t.Fatalf("Extract into a non-empty folder: got %v, want ErrNotEmpty", err)
	}
	if got := dirContents(t, dir); len(got) != 1 {
		t.Errorf("the folder now holds %q, want only keep.txt", got)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := bundle.Extract(context.Background(), res.Path, file, pub, false); err == nil {
		t.Error("Extract onto a file: got nil, want an error")
	}
}

func TestExtractCancelled(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(t, "cancel")
	res, _ := writeTestBundle(t, priv, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	parent := t.TempDir()
	_, err := bundle.Extract(ctx, res.Path, filepath.Join(parent, "x"), pub, false)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Extract with a cancelled context: got %v, want context.Canceled", err)
	}
	if got := dirContents(t, parent); len(got) != 0 {
		t.Errorf("left %q behind", got)
	}
}

// TestExtractFinish: what Finish writes in the staging folder is in dir
// when Extract returns, renamed with the payload; a Finish that fails
// fails the extraction and leaves nothing behind.
func TestExtractFinish(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(t, "finish")
	res, _ := writeTestBundle(t, priv, 0)
	parent := t.TempDir()
	dir := filepath.Join(parent, "release")
	m, err := bundle.ExtractWith(context.Background(), res.Path, dir, bundle.ExtractOptions{PublicKey: pub,
		Finish: func(staging string, m bundle.Manifest) error {
			if _, err := os.Stat(filepath.Join(dir)); err == nil {
				t.Error("dir exists before Finish returned")
			}
			return os.WriteFile(filepath.Join(staging, "release.txt"), []byte(m.Release), 0o644)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "release.txt")); err != nil || string(b) != m.Release {
		t.Fatalf("the file Finish wrote: %q, %v; want %q in dir", b, err, m.Release)
	}

	failed := filepath.Join(parent, "failed")
	_, err = bundle.ExtractWith(context.Background(), res.Path, failed, bundle.ExtractOptions{PublicKey: pub,
		Finish: func(string, bundle.Manifest) error { return errors.New("disk full") }})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Extract with a failing Finish: %v, want its error", err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 1 || entries[0].Name() != "release" {
		t.Errorf("a failed Finish left %v beside the first release", entries)
	}
}
