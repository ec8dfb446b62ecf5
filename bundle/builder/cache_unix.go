//go:build unix

package builder

import (
	"errors"
	"os"
	"syscall"
)

// lockCacheDir takes an exclusive lock on path (created if missing), held
// until the file is closed, so that two builds never write one cache.
func lockCacheDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errors.New("another bundle build is using this cache (wait for it, or set another --cache-dir)")
		}
		return nil, err
	}
	return f, nil
}
