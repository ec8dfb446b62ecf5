package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFirstDiff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b         string
		n            int
		aLine, bLine string
	}{
		{"a\nb\nc\n", "a\nx\nc\n", 2, `"b"`, `"x"`},
		{"a\n", "b\n", 1, `"a"`, `"b"`},
		{"a\nb", "a\nb\nc", 3, "end of file", `"c"`},
		{"a\nb\n", "a\nb", 3, `""`, "end of file"},
	}
	for _, tt := range tests {
		n, aLine, bLine := firstDiff([]byte(tt.a), []byte(tt.b))
		if n != tt.n || aLine != tt.aLine || bLine != tt.bLine {
			t.Errorf("firstDiff(%q, %q): got %d, %q, %q; want %d, %q, %q", tt.a, tt.b, n, aLine, bLine, tt.n, tt.aLine, tt.bLine)
		}
	}
}

// recorder is a testing.TB that keeps what Errorf says.
type recorder struct {
	testing.TB
	msgs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func TestCheckUpdateThenCompare(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "testdata", "x.golden")
	Check(t, path, []byte("one\ntwo\n"), true)
	if b, err := os.ReadFile(path); err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("after update: got %q, %v; want the new content", b, err)
	}
	Check(t, path, []byte("one\ntwo\n"), false) // same: passes

	rec := &recorder{TB: t}
	Check(rec, path, []byte("one\nthree\n"), false)
	if len(rec.msgs) != 1 {
		t.Fatalf("Check with different content: got messages %q, want one", rec.msgs)
	}
	for _, want := range []string{"x.golden differs at line 2:\n  got:  \"three\"\n  want: \"two\"\n", "--- got:\none\nthree\n", "--- want:\none\ntwo\n", "go test . -run '^TestCheckUpdateThenCompare$' -update"} {
		if !strings.Contains(rec.msgs[0], want) {
			t.Errorf("got message %q, want it to contain %q", rec.msgs[0], want)
		}
	}
}
