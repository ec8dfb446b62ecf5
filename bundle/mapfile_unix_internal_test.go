//go:build unix

package bundle

import (
	"archive/tar"
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mappedFileCut maps a file of pages zero pages, then cuts the file to
// nothing: reading the map faults.
func mappedFileCut(t *testing.T, pages int) ([]byte, func()) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "blob")
	size := int64(pages * os.Getpagesize())
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // the map outlives it
	data, unmap := mapFile(f, size)
	if data == nil {
		t.Fatal("mapFile mapped nothing")
	}
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	return data, unmap
}

// TestHashBehindMappedFileCut: a mapped file cut short while its pages are
// lent to the hash fails the hash with an error; the process survives.
func TestHashBehindMappedFileCut(t *testing.T) {
	data, unmap := mappedFileCut(t, 4)
	hb := newHashBehind()
	hb.lend(data)
	hb.then(unmap)
	if _, err := hb.Sum(); err == nil || !strings.Contains(err.Error(), "mapped file") {
		t.Fatalf("Sum after the file was cut: %v, want an error about the mapped file", err)
	}
}

// TestWriteLentFileCut: a member whose mapped file is cut short while it is
// written into a split bundle (whose sink hashes each part) fails the write
// with an error; the process survives.
func TestWriteLentFileCut(t *testing.T) {
	data, unmap := mappedFileCut(t, 8)
	defer unmap()
	size := int64(len(data))
	sink := &fileSink{dir: t.TempDir(), base: "cut.bundle", limit: 3 * int64(os.Getpagesize())}
	defer sink.abort()
	out := &streamOut{sink: sink, h: newHashBehind()}
	defer out.h.close()
	bw := bufio.NewWriterSize(out, 4096)
	st := &tarStream{bw: bw, to: &switchWriter{w: bw}, out: out}
	st.tw = tar.NewWriter(st.to)
	prog := &byteProgress{ctx: context.Background()}
	file := payloadFile{File: File{Path: "images/blobs/sha256/x", Size: size, Mode: 0o644}}
	err := st.writeLent("x", file, data, time.Unix(0, 0), prog, nil)
	if err == nil {
		t.Fatal("writeLent of a file cut short: no error")
	}
	t.Logf("writeLent: %v", err)
}
