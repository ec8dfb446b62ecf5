package templatetar

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"airgapcoder/internal/testfs"
)

// tarEntry is one member of a crafted archive.
type tarEntry struct {
	hdr  tar.Header
	body string
	// short marks a body shorter than hdr.Size: the archive is cut off
	// right after it.
	short bool
}

// file returns a regular file entry with mode 0644.
func file(name, body string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body: body}
}

// dirEntry returns a directory entry.
func dirEntry(name string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}

// craft writes entries with archive/tar, whatever their names and types.
func craft(tb testing.TB, entries ...tarEntry) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := tw.WriteHeader(&e.hdr); err != nil {
			tb.Fatalf("craft %q: %v", e.hdr.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			tb.Fatalf("craft %q: %v", e.hdr.Name, err)
		}
		if e.short {
			return buf.Bytes() // No padding, no end marker.
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatalf("craft: %v", err)
	}
	return buf.Bytes()
}

// setTypeflag rewrites the type of the header block at offset off and fixes
// its checksum, to make entries archive/tar refuses to write.
func setTypeflag(b []byte, off int, flag byte) []byte {
	b = bytes.Clone(b)
	blk := b[off : off+512]
	blk[156] = flag
	copy(blk[148:156], "        ")
	var sum int
	for _, c := range blk {
		sum += int(c)
	}
	copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// paxRecords formats PAX extended header records.
func paxRecords(kv ...string) string {
	var s strings.Builder
	for i := 0; i < len(kv); i += 2 {
		rec := " " + kv[i] + "=" + kv[i+1] + "\n"
		n := len(rec)
		for n != len(rec)+len(strconv.Itoa(n)) {
			n = len(rec) + len(strconv.Itoa(n)) // The length counts its own digits.
		}
		s.WriteString(strconv.Itoa(n) + rec)
	}
	return s.String()
}

// sparseTar is an archive whose PAX headers make "sparse.tf" a GNU sparse
// file: 5 bytes in the stream, 1 TiB when read.
func sparseTar(tb testing.TB) []byte {
	recs := paxRecords(
		"GNU.sparse.numblocks", "1",
		"GNU.sparse.map", "0,5",
		"GNU.sparse.size", "1099511627776",
	)
	b := craft(tb,
		file("main.tf", "x"),
		file("PaxHeaders/sparse.tf", recs),
		file("sparse.tf", "hello"),
	)
	return setTypeflag(b, 1024, tar.TypeXHeader)
}

// oldSparseTar is an archive holding an old GNU format sparse entry.
func oldSparseTar(tb testing.TB) []byte {
	e := file("sparse.tf", "hello")
	e.hdr.Format = tar.FormatGNU
	return setTypeflag(craft(tb, file("main.tf", "x"), e), 1024, tar.TypeGNUSparse)
}

// writeTree creates files under dir: a name ending in "/" is a directory,
// a value starting with "->" a symbolic link, a name ending in "*" an
// executable file (without the star).
func writeTree(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(name, "*")))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		var err error
		switch {
		case strings.HasSuffix(name, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.HasPrefix(content, "->"):
			err = os.Symlink(filepath.FromSlash(strings.TrimPrefix(content, "->")), p)
		case strings.HasSuffix(name, "*"):
			err = os.WriteFile(p, []byte(content), 0o755)
		default:
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// readTree returns what lies under dir, in writeTree's notation with the
// file mode added: "dir/" → "", "file" → "0644 content". It fails on
// anything but files and directories.
func readTree(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	got := make(map[string]string)
	for rel, e := range testfs.Read(tb, dir) {
		if e.Mode.IsDir() {
			got[rel+"/"] = ""
		} else {
			got[rel] = fmt.Sprintf("%04o %s", e.Mode.Perm(), e.Data)
		}
	}
	return got
}

// emptyDir returns a new empty directory "out" inside a fresh temporary
// directory, and that parent.
func emptyDir(tb testing.TB) (dir, parent string) {
	tb.Helper()
	parent = tb.TempDir()
	dir = filepath.Join(parent, "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir, parent
}

// assertOnlyEmptyOut fails unless parent holds only an empty "out".
func assertOnlyEmptyOut(tb testing.TB, parent string) {
	tb.Helper()
	ents, err := os.ReadDir(parent)
	if err != nil {
		tb.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "out" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		tb.Fatalf("parent holds %q, want only [out]", names)
	}
	if got := readTree(tb, filepath.Join(parent, "out")); len(got) != 0 {
		tb.Fatalf("out holds %v, want nothing", got)
	}
}
