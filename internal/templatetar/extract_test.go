package templatetar

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

func TestExtractRejects(t *testing.T) {
	for _, tc := range hostileCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			dir, parent := emptyDir(t)
			err := Extract(bytes.NewReader(tc.tar), dir, tc.max)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Extract error = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("Extract error = %q, want it to mention %s", err, tc.mention)
			}
			assertOnlyEmptyOut(t, parent)
		})
	}
}

func TestExtractModes(t *testing.T) {
	entry := func(name string, mode int64) tarEntry {
		e := file(name, name)
		e.hdr.Mode = mode
		return e
	}
	b := craft(t,
		entry("plain", 0o644),
		entry("private", 0o600),
		entry("world-writable", 0o666),
		entry("exec", 0o755),
		entry("owner-exec", 0o700),
		entry("setuid", 0o4755),
		entry("group-exec-only", 0o010),
	)
	dir, _ := emptyDir(t)
	if err := Extract(bytes.NewReader(b), dir, 0); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	want := map[string]string{
		"plain":           "0644 plain",
		"private":         "0644 private",
		"world-writable":  "0644 world-writable",
		"exec":            "0755 exec",
		"owner-exec":      "0755 owner-exec",
		"setuid":          "0755 setuid",
		"group-exec-only": "0755 group-exec-only",
	}
	if got := readTree(t, dir); !maps.Equal(got, want) {
		t.Errorf("extracted %v, want %v", got, want)
	}
	info, err := os.Stat(filepath.Join(dir, "setuid"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
		t.Errorf("setuid mode = %v, want no special bits", info.Mode())
	}
}

func TestExtractTarget(t *testing.T) {
	valid := craft(t, file("main.tf", "m"))
	tests := []struct {
		name  string
		setup func(t *testing.T) string // returns the target
		want  string                    // in the error
	}{
		{
			name: "not empty",
			setup: func(t *testing.T) string {
				dir, _ := emptyDir(t)
				writeTree(t, dir, map[string]string{"keep.txt": "mine"})
				return dir
			},
			want: "not empty",
		},
		{
			name:  "missing",
			setup: func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") },
			want:  "nope",
		},
		{
			name: "a file",
			setup: func(t *testing.T) string {
				p := filepath.Join(t.TempDir(), "file")
				writeTree(t, filepath.Dir(p), map[string]string{"file": "x"})
				return p
			},
			want: "file",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.setup(t)
			before := readTreeIfDir(t, target)
			err := Extract(bytes.NewReader(valid), target, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Extract error = %v, want one mentioning %q", err, tc.want)
			}
			if after := readTreeIfDir(t, target); !maps.Equal(before, after) {
				t.Errorf("target changed from %v to %v", before, after)
			}
		})
	}
}

// readTreeIfDir is readTree for a directory, and nil for anything else.
func readTreeIfDir(t *testing.T, p string) map[string]string {
	t.Helper()
	if info, err := os.Stat(p); err != nil || !info.IsDir() {
		return nil
	}
	return readTree(t, p)
}

// TestExtractReadError checks that a reader failing halfway leaves the
// folder empty and reports the reader's error.
func TestExtractReadError(t *testing.T) {
	boom := errors.New("connection reset")
	b := craft(t, file("a/main.tf", "m"), file("b.tf", strings.Repeat("z", 4000)))
	dir, parent := emptyDir(t)
	err := Extract(io.MultiReader(bytes.NewReader(b[:3000]), iotest.ErrReader(boom)), dir, 0)
	if !errors.Is(err, boom) {
		t.Fatalf("Extract error = %v, want %v", err, boom)
	}
	if !strings.Contains(err.Error(), `"b.tf"`) {
		t.Errorf("Extract error = %q, want it to name \"b.tf\"", err)
	}
	assertOnlyEmptyOut(t, parent)
}

// TestExtractTolerantForms checks that forms Validate accepts extract as
// expected.
func TestExtractTolerantForms(t *testing.T) {
	b := craft(t,
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "abc"}}},
		dirEntry("./"),
		file("./mod/a.tf", "a"),
		dirEntry("./mod/"),
		dirEntry("./empty/"),
		file("main.tf", "m"),
	)
	dir, _ := emptyDir(t)
	if err := Extract(bytes.NewReader(b), dir, 0); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	want := map[string]string{"mod/": "", "mod/a.tf": "0644 a", "empty/": "", "main.tf": "0644 m"}
	if got := readTree(t, dir); !maps.Equal(got, want) {
		t.Errorf("extracted %v, want %v", got, want)
	}
}
