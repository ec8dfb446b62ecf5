package bundle

import (
	"os"

	"golang.org/x/sys/unix"
)

// writebackWindow is the unit in which a bundle file is handed to
// writeback: its writer waits for the disk only when two windows before
// the one it just wrote are still on their way there.
const writebackWindow = 8 << 20

// writeBehind streams a file being written to disk as it grows, the way a
// long sequential write should go on Linux: each window of bytes is handed
// to writeback as soon as it is written (sync_file_range), and once it has
// reached the disk, its pages leave the page cache (POSIX_FADV_DONTNEED).
// A bundle is written once and fsynced before it is renamed into place, so
// keeping its bytes in memory only postpones the disk writes to that fsync,
// fills memory with dirty pages (gigabytes, for a large bundle, evicting
// what the host was using) and takes fresh pages for every byte: the pages
// of a window are reused by the next ones instead. Waiting for the disk
// happens on a goroutine of its own, so the writer goes on writing the next
// window meanwhile (see writebackWindow). It is advice only: errors are
// ignored here and the fsync at the end reports what failed.
type writeBehind struct {
	fd      int
	started int64 // bytes before this were handed to writeback
	windows chan [2]int64
	done    chan struct{}
}

func newWriteBehind(f *os.File) *writeBehind {
	w := &writeBehind{fd: int(f.Fd()), windows: make(chan [2]int64, 1), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for r := range w.windows {
			unix.SyncFileRange(w.fd, r[0], r[1],
				unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
			unix.Fadvise(w.fd, r[0], r[1], unix.FADV_DONTNEED)
		}
	}()
	return w
}

// wrote says the file now holds end bytes.
func (w *writeBehind) wrote(end int64) {
	if end-w.started < writebackWindow {
		return
	}
	unix.SyncFileRange(w.fd, w.started, end-w.started, unix.SYNC_FILE_RANGE_WRITE)
	w.windows <- [2]int64{w.started, end - w.started}
	w.started = end
}

// stop waits for the windows handed over so far; the file must stay open
// until it returns.
func (w *writeBehind) stop() {
	close(w.windows)
	<-w.done
}
