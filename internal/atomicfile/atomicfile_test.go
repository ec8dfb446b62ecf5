package atomicfile_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"airgapcoder/internal/atomicfile"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := atomicfile.Write(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(p, []byte("two"), 0o640); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(b) != "two" || st.Mode().Perm() != 0o640 {
		t.Fatalf("got %q %v, want two 0640", b, st.Mode().Perm())
	}
	// A failing writer leaves the old content and no temp file.
	boom := errors.New("boom")
	if err := atomicfile.WriteFunc(p, 0o600, func(w io.Writer) error { _, _ = w.Write([]byte("partial")); return boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
	b, _ = os.ReadFile(p)
	entries, _ := os.ReadDir(dir)
	if string(b) != "two" || len(entries) != 1 {
		t.Fatalf("after a failed write: content %q, %d entries; want two, 1", b, len(entries))
	}
}

func TestCreateNew(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	// The mode is exact: the umask (usually 022) does not clear group write.
	if err := atomicfile.CreateNew(p, 0o775, write("one")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(b) != "one" || st.Mode().Perm() != 0o775 {
		t.Fatalf("got %q %v, want one 0775", b, st.Mode().Perm())
	}
	// An existing file is refused and left as it was.
	if err := atomicfile.CreateNew(p, 0o644, write("two")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("over an existing file: got %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Fatalf("over an existing file: content %q, want one", b)
	}
	// A failing writer leaves nothing behind.
	boom := errors.New("boom")
	q := filepath.Join(dir, "g")
	err := atomicfile.CreateNew(q, 0o644, func(w io.Writer) error { _, _ = io.WriteString(w, "partial"); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("failing writer: got %v, want boom", err)
	}
	if _, err := os.Lstat(q); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("failing writer: the file is still there (%v)", err)
	}
}
