// Package golden compares a test's output with a golden file under
// testdata/ and rewrites the file on request.
//
// The -update flag stays in each test package, as in the standard library:
//
//	var update = flag.Bool("update", false, "rewrite the golden files")
//
//	golden.Check(t, filepath.Join("testdata", "unit.golden"), got, *update)
//
// so that `go test ./pkg -run TestX -update` rewrites that package's files
// and nothing else. Golden files are compared byte for byte; after
// rewriting them, read the diff before committing it.
package golden

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Check compares got with the golden file at path. With update it writes
// got to path instead (creating its folder) and passes. Otherwise a missing
// or different file fails t with got, want, the first line that differs,
// and the command that rewrites it.
func Check(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("update golden file: %v", err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("update golden file: %v", err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file: %v\n%s", err, Rerun(t))
	}
	if bytes.Equal(got, want) {
		return
	}
	n, gotLine, wantLine := firstDiff(got, want)
	t.Errorf("%s differs at line %d:\n  got:  %s\n  want: %s\n--- got:\n%s\n--- want:\n%s\n--- %s",
		path, n, gotLine, wantLine, got, want, Rerun(t))
}

// Rerun returns the command that rewrites the golden files of t's
// top-level test, for failure messages.
func Rerun(t testing.TB) string {
	name, _, _ := strings.Cut(t.Name(), "/")
	return fmt.Sprintf("if the change is intended, rewrite the golden files from this package's folder with: go test . -run '^%s$' -update", name)
}

// firstDiff returns the 1-based number of the first line where a and b
// differ, and that line of each, quoted, or "end of file".
func firstDiff(a, b []byte) (n int, aLine, bLine string) {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	line := func(lines []string, i int) string {
		if i >= len(lines) {
			return "end of file"
		}
		return strconv.Quote(lines[i])
	}
	for i := range max(len(al), len(bl)) {
		if i >= len(al) || i >= len(bl) || al[i] != bl[i] {
			return i + 1, line(al, i), line(bl, i)
		}
	}
	return 0, "", ""
}
