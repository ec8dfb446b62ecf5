package bundle_test

import (
	"context"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"airgapcoder/bundle"
)

// TestWriteLeavesPageCache: a bundle goes to disk as it is written, and what
// reached the disk leaves the page cache, so that writing a bundle of many
// gigabytes does not fill the host's memory: of a 48 MiB bundle, at most
// two 8 MiB windows are still in memory when Write returns.
func TestWriteLeavesPageCache(t *testing.T) {
	t.Parallel()
	files := map[string]payloadEntry{}
	for i := range 3 {
		files["postgres/archive-"+string(rune('a'+i))+".txz"] = payloadEntry{random(16<<20, uint64(90+i)), 0o644}
	}
	out := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(out, &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary folder is on tmpfs, whose files live in the page cache")
	}
	res, err := bundle.Write(context.Background(), bundle.WriteOptions{
		PayloadDir: makePayload(t, files), OutputDir: out, Manifest: bundle.Manifest{Name: "big", Release: "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := unix.Mmap(int(f.Fd()), 0, int(res.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(data)
	pages := (len(data) + os.Getpagesize() - 1) / os.Getpagesize()
	vec := make([]byte, pages)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	resident := 0
	for _, v := range vec {
		resident += int(v & 1)
	}
	if mib := resident * os.Getpagesize() >> 20; mib > 16 {
		t.Errorf("%d MiB of the %d MiB bundle are still in the page cache, want at most 16", mib, res.Size>>20)
	}
}
