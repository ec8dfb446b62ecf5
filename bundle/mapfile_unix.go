//go:build unix

package bundle

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps f's first size bytes for reading, or returns nil when it
// cannot (the caller reads the file instead). unmap releases the map.
func mapFile(f *os.File, size int64) (data []byte, unmap func()) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil
	}
	_ = unix.Madvise(data, unix.MADV_SEQUENTIAL)
	return data, func() { _ = unix.Munmap(data) }
}
