package templatetar

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// hostileCase is an archive that Validate and Extract must reject.
type hostileCase struct {
	name    string
	tar     []byte
	max     int64 // 0 means DefaultMaxSize
	want    error
	mention string // text the error must contain, usually the quoted entry name
}

// hostileCases returns the crafted archives. Most start with a valid file,
// so that Extract has written something before it meets the bad entry.
func hostileCases(tb testing.TB) []hostileCase {
	ok := file("main.tf", "terraform {}\n")
	withType := func(name string, flag byte, link string) []byte {
		return craft(tb, ok, tarEntry{hdr: tar.Header{Typeflag: flag, Name: name, Linkname: link, Mode: 0o644, Devmajor: 1, Devminor: 3}})
	}
	big := strings.Repeat("x", 4096)
	var small []tarEntry
	for i := range 8 {
		small = append(small, file(fmt.Sprintf("f%d.tf", i), "x"))
	}
	huge := file("huge.tf", "only a little")
	huge.hdr.Size = 1 << 40
	huge.short = true
	truncated := file("cut.tf", strings.Repeat("y", 300))
	truncated.hdr.Size = 600
	truncated.short = true
	valid := craft(tb, ok)
	twoFiles := craft(tb, ok, file("second.tf", "x"))

	return []hostileCase{
		{name: "parent traversal", tar: craft(tb, ok, file("../x", "x")), want: ErrUnsafePath, mention: `"../x"`},
		{name: "absolute path", tar: craft(tb, ok, file("/etc/passwd", "x")), want: ErrUnsafePath, mention: `"/etc/passwd"`},
		{name: "traversal through a folder", tar: craft(tb, ok, file("a/../../x", "x")), want: ErrUnsafePath, mention: `"a/../../x"`},
		{name: "dot-dot that stays inside", tar: craft(tb, ok, file("a/../b", "x")), want: ErrUnsafePath, mention: `"a/../b"`},
		{name: "directory traversal", tar: craft(tb, ok, dirEntry("../up/")), want: ErrUnsafePath, mention: `"../up/"`},
		{name: "backslash traversal", tar: craft(tb, ok, file(`..\x`, "x")), want: ErrUnsafePath, mention: `"..\\x"`},
		{name: "control character", tar: craft(tb, ok, file("a\nb", "x")), want: ErrUnsafePath, mention: `"a\nb"`},
		{name: "file named dot", tar: craft(tb, ok, file(".", "x")), want: ErrUnsafePath, mention: `"."`},
		{name: "overlong element", tar: craft(tb, ok, file(strings.Repeat("a", 256), "x")), want: ErrUnsafePath, mention: "255"},
		{name: "symlink out", tar: withType("link", tar.TypeSymlink, "/etc/passwd"), want: ErrUnsupportedType, mention: `"link" is a symbolic link to "/etc/passwd"`},
		{name: "symlink in", tar: withType("link", tar.TypeSymlink, "main.tf"), want: ErrUnsupportedType, mention: `"link"`},
		{name: "hardlink", tar: withType("hard", tar.TypeLink, "main.tf"), want: ErrUnsupportedType, mention: `"hard" is a hard link to "main.tf"`},
		{name: "char device", tar: withType("null", tar.TypeChar, ""), want: ErrUnsupportedType, mention: `"null" is a character device`},
		{name: "block device", tar: withType("sda", tar.TypeBlock, ""), want: ErrUnsupportedType, mention: `"sda" is a block device`},
		{name: "fifo", tar: withType("pipe", tar.TypeFifo, ""), want: ErrUnsupportedType, mention: `"pipe" is a FIFO`},
		{name: "pax sparse file", tar: sparseTar(tb), want: ErrUnsupportedType, mention: `"sparse.tf" is a sparse file`},
		{name: "old gnu sparse file", tar: oldSparseTar(tb), want: ErrUnsupportedType, mention: `"sparse.tf" is a sparse file`},
		{name: "file over the limit", tar: craft(tb, ok, file("big.tf", big)), max: 2048, want: ErrTooLarge, mention: `"big.tf" declares 4096 bytes`},
		{name: "stream over the limit", tar: craft(tb, small...), max: 3000, want: ErrTooLarge, mention: "over the limit of 3000 bytes"},
		{name: "too many implied folders", tar: craft(tb, file("a/b/c/d/e/f/g/h/i/j.tf", "x")), max: 4096, want: ErrTooLarge, mention: `"a/b/c/d/e/f/g/h/i/j.tf" makes more than 8 paths`},
		{name: "huge declared size", tar: craft(tb, ok, huge), want: ErrTooLarge, mention: `"huge.tf" declares 1099511627776 bytes`},
		{name: "garbage", tar: bytes.Repeat([]byte("garbage!"), 300), want: ErrNotTar, mention: "not a tar archive"},
		{name: "short garbage", tar: []byte("hello"), want: ErrNotTar, mention: "not a tar archive"},
		{name: "truncated", tar: craft(tb, ok, truncated), want: ErrNotTar, mention: `in entry "cut.tf"`},
		{name: "no end marker", tar: valid[:len(valid)-1024], want: ErrNotTar, mention: `truncated after entry "main.tf"`},
		{name: "cut between entries", tar: twoFiles[:1024], want: ErrNotTar, mention: `truncated after entry "main.tf"`},
		{name: "one zero block", tar: make([]byte, 512), want: ErrNotTar, mention: "no end-of-archive marker"},
		{name: "data after the end", tar: append(bytes.Clone(valid), "trailing"...), want: ErrNotTar, mention: "after the end"},
		{name: "empty stream", tar: nil, want: ErrEmpty, mention: "template has no files"},
		{name: "only folders", tar: craft(tb, dirEntry("a/"), dirEntry("a/b/")), want: ErrEmpty, mention: "template has no files"},
		{name: "duplicate file", tar: craft(tb, ok, file("main.tf", "again")), want: ErrDuplicatePath, mention: `"main.tf" appears twice`},
		{name: "duplicate spelled differently", tar: craft(tb, ok, file("./main.tf", "again")), want: ErrDuplicatePath, mention: `"main.tf"`},
		{name: "duplicate folder", tar: craft(tb, ok, dirEntry("a/"), dirEntry("a/")), want: ErrDuplicatePath, mention: `"a/" appears twice`},
		{name: "file then folder", tar: craft(tb, ok, file("a", "x"), file("a/b", "x")), want: ErrDuplicatePath, mention: `"a/b" needs "a" to be a directory`},
		{name: "folder then file", tar: craft(tb, ok, file("a/b", "x"), file("a", "x")), want: ErrDuplicatePath, mention: `"a" is a file, but earlier entries make it a directory`},
	}
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range hostileCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			sum, err := Validate(bytes.NewReader(tc.tar), tc.max)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Validate error = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("Validate error = %q, want it to mention %s", err, tc.mention)
			}
			if sum.Files != 0 || sum.Paths != nil {
				t.Errorf("Validate summary = %+v, want zero on error", sum)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	globalHeader := tarEntry{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header",
		PAXRecords: map[string]string{"comment": "0123456789abcdef"}}}
	longName := strings.Repeat("d/", 60) + "main.tf" // Over the 100 bytes of a plain ustar name.
	gnuLong := file(longName, "x")
	gnuLong.hdr.Format = tar.FormatGNU
	paxLong := file(longName, "x")
	paxLong.hdr.Format = tar.FormatPAX
	exec := file("run.sh", "#!/bin/sh\n")
	exec.hdr.Mode = 0o4750

	tests := []struct {
		name string
		tar  []byte
		want Summary
	}{
		{
			name: "plain",
			tar:  craft(t, dirEntry("mod/"), file("mod/a.tf", "aa"), file("main.tf", "m")),
			want: Summary{Files: 2, Bytes: 3, Paths: []string{"mod/", "mod/a.tf", "main.tf"}},
		},
		{
			name: "dot slash names as from tar -C dir .",
			tar:  craft(t, dirEntry("./"), file("./main.tf", "m"), dirEntry("./mod/"), file("./mod/a.tf", "a")),
			want: Summary{Files: 2, Bytes: 2, Paths: []string{"main.tf", "mod/", "mod/a.tf"}},
		},
		{
			name: "folder entry after its files",
			tar:  craft(t, file("mod/a.tf", "a"), dirEntry("mod/")),
			want: Summary{Files: 1, Bytes: 1, Paths: []string{"mod/a.tf", "mod/"}},
		},
		{
			name: "git archive global header",
			tar:  craft(t, globalHeader, file("main.tf", "m")),
			want: Summary{Files: 1, Bytes: 1, Paths: []string{"main.tf"}},
		},
		{
			name: "gnu long name",
			tar:  craft(t, gnuLong),
			want: Summary{Files: 1, Bytes: 1, Paths: []string{longName}},
		},
		{
			name: "pax long name",
			tar:  craft(t, paxLong),
			want: Summary{Files: 1, Bytes: 1, Paths: []string{longName}},
		},
		{
			name: "odd but safe names",
			tar:  craft(t, file("..foo", "1"), file("a..b/c", "2"), file("ünïcode name.tf", "3"), exec),
			want: Summary{Files: 4, Bytes: 13, Paths: []string{"..foo", "a..b/c", "ünïcode name.tf", "run.sh"}},
		},
		{
			name: "padded to a 10240-byte record as GNU tar does",
			tar:  padTo(craft(t, file("main.tf", "m")), 10240),
			want: Summary{Files: 1, Bytes: 1, Paths: []string{"main.tf"}},
		},
		{
			name: "empty file",
			tar:  craft(t, file("empty.tf", "")),
			want: Summary{Files: 1, Bytes: 0, Paths: []string{"empty.tf"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Validate(bytes.NewReader(tc.tar), 0)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got.Files != tc.want.Files || got.Bytes != tc.want.Bytes || !slices.Equal(got.Paths, tc.want.Paths) {
				t.Errorf("Validate = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestValidateLimitBoundary checks that a stream of exactly maxSize bytes
// passes and one byte less of limit fails.
func TestValidateLimitBoundary(t *testing.T) {
	b := craft(t, file("main.tf", strings.Repeat("z", 1000)))
	size := int64(len(b))
	if _, err := Validate(bytes.NewReader(b), size); err != nil {
		t.Errorf("Validate with limit %d = %v, want nil", size, err)
	}
	if _, err := Validate(bytes.NewReader(b), size-1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Validate with limit %d = %v, want %v", size-1, err, ErrTooLarge)
	}
}

// TestValidateReadError checks that a failing reader is reported as such,
// not as a malformed archive.
func TestValidateReadError(t *testing.T) {
	boom := errors.New("connection reset")
	b := craft(t, file("main.tf", strings.Repeat("z", 2000)))
	r := io.MultiReader(bytes.NewReader(b[:1000]), iotest.ErrReader(boom))
	_, err := Validate(r, 0)
	if !errors.Is(err, boom) {
		t.Fatalf("Validate error = %v, want %v", err, boom)
	}
	if errors.Is(err, ErrNotTar) {
		t.Errorf("Validate error = %v, want it not to claim %v", err, ErrNotTar)
	}
}

// padTo appends zeros to b up to n bytes.
func padTo(b []byte, n int) []byte {
	return append(b, make([]byte, n-len(b))...)
}
