package bundle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
