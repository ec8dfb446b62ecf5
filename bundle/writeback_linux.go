package bundle

import (
	"os"

	"golang.org/x/sys/unix"
)

// writebackWindow is how many bytes a bundle file may hold in the page
// cache, written but not yet on disk, before its writer waits for the disk.
const writebackWindow = 8 << 20

// writeBehind streams a file being written to disk as it grows, the way a
// long sequential write should go on Linux: each window of bytes is handed
// to writeback as soon as it is written (sync_file_range), and once the
// window before it has reached the disk, that window's pages leave the page
// cache (POSIX_FADV_DONTNEED). A bundle is written once and fsynced before
// it is renamed into place, so keeping its bytes in memory only postpones
// the disk writes to that fsync, fills memory with dirty pages (gigabytes,
// for a large bundle, evicting what the host was using) and takes fresh
// pages for every byte: the pages of a window are reused by the next ones
// instead. It is advice only: errors are ignored here and the fsync at the
// end reports what failed.
type writeBehind struct {
	fd      int
	started int64 // bytes before this were handed to writeback
	dropped int64 // bytes before this are on disk and out of the page cache
}

func newWriteBehind(f *os.File) *writeBehind { return &writeBehind{fd: int(f.Fd())} }

// wrote says the file now holds end bytes.
func (w *writeBehind) wrote(end int64) {
	if end-w.started < writebackWindow {
		return
	}
	unix.SyncFileRange(w.fd, w.started, end-w.started, unix.SYNC_FILE_RANGE_WRITE)
	if w.started > w.dropped {
		unix.SyncFileRange(w.fd, w.dropped, w.started-w.dropped,
			unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
		unix.Fadvise(w.fd, w.dropped, w.started-w.dropped, unix.FADV_DONTNEED)
		w.dropped = w.started
	}
	w.started = end
}
