package atomicfile_test

import (
	"errors"
	"io"
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
