// Package testfs puts files in place and reads folders back for tests: a
// file written (or a torn record appended) in one call, the names in a
// folder, and a whole tree read into a map that a test compares with what
// it expects. Every function fails the test on an error instead of
// returning it.
//
// It owns no format: what a file holds and what a tree must look like
// stay with the test that checks them. It is for tests only.
package testfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// WriteFile writes content to dir/name (mode 0644), creating the folders
// between, and returns the file's path.
func WriteFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Append adds data at the end of the existing file path, as a writer that
// crashes mid-record leaves it (a line without its newline, say).
func Append(t testing.TB, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// Names returns the names of dir's entries, sorted; none when dir does not
// exist.
func Names(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Entry is one file or folder of a tree that Read returns.
type Entry struct {
	// Mode is the entry's type and permission bits (fs.ModeDir for a
	// folder, no type bit for a regular file).
	Mode fs.FileMode
	// Data is a file's content; nil for a folder.
	Data []byte
}

// Read returns what lies under dir, keyed by each entry's slash-separated
// path relative to dir (dir itself is not in it). It fails the test on
// anything but regular files and folders (a symbolic link, a device),
// naming it.
func Read(t testing.TB, dir string) map[string]Entry {
	t.Helper()
	tree := make(map[string]Entry)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			tree[rel] = Entry{Mode: info.Mode()}
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tree[rel] = Entry{Mode: info.Mode(), Data: b}
		default:
			return fmt.Errorf("%s: unexpected mode %v", rel, info.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read tree %s: %v", dir, err)
	}
	return tree
}
