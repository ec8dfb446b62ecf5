//go:build !unix

package builder

import "os"

// lockCacheDir only creates the lock file where flock does not exist.
func lockCacheDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
}
