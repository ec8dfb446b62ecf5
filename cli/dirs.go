package cli

import (
	"os"
	"path/filepath"
)

// cacheDirFor returns the user's cache dir for name.
func cacheDirFor(name string) string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, name)
	}
	return filepath.Join(os.TempDir(), name+"-cache")
}
