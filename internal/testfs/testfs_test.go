package testfs_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"airgapcoder/internal/testfs"
)

// TestRoundTrip: what WriteFile and Append put in a folder, Names lists and
// Read returns, folders included; a missing folder has no names.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := testfs.WriteFile(t, dir, "sub/a.txt", "one\n")
	if want := filepath.Join(dir, "sub", "a.txt"); p != want {
		t.Errorf("WriteFile returned %s, want %s", p, want)
	}
	testfs.Append(t, p, "tw")
	testfs.WriteFile(t, dir, "b.txt", "")

	if got, want := testfs.Names(t, dir), []string{"b.txt", "sub"}; !slices.Equal(got, want) {
		t.Errorf("Names: got %v, want %v", got, want)
	}
	if got := testfs.Names(t, filepath.Join(dir, "missing")); len(got) != 0 {
		t.Errorf("Names of a missing folder: got %v, want none", got)
	}

	tree := testfs.Read(t, dir)
	if len(tree) != 3 {
		t.Errorf("Read: got %d entries %v, want 3", len(tree), tree)
	}
	if e := tree["sub"]; !e.Mode.IsDir() || e.Data != nil {
		t.Errorf("sub: got %v %q, want a folder", e.Mode, e.Data)
	}
	if e := tree["sub/a.txt"]; !e.Mode.IsRegular() || e.Mode.Perm() != 0o644 || string(e.Data) != "one\ntw" {
		t.Errorf("sub/a.txt: got %v %q, want -rw-r--r-- \"one\\ntw\"", e.Mode, e.Data)
	}
	if e, ok := tree["b.txt"]; !ok || len(e.Data) != 0 {
		t.Errorf("b.txt: got %v %q (present %v), want an empty file", e.Mode, e.Data, ok)
	}
}

// TestReadRefusesLinks: Read fails on a symbolic link rather than follow
// or skip it.
func TestReadRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("elsewhere", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		testfs.Read(ft, dir)
	}()
	if !ft.failed {
		t.Error("Read of a folder holding a symbolic link did not fail the test")
	}
}

// fatalRecorder records a Fatalf instead of ending the test, then unwinds
// with a panic that the caller recovers.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Fatalf(string, ...any) {
	f.failed = true
	panic("fatal")
}
