package agentstat

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

func rootFS() (fs.FS, error) { return os.DirFS("/"), nil }

// Disk reports the filesystem that holds path, from statfs(2): blocks in
// use (total - free) out of all blocks, in bytes, as df(1) counts them.
func Disk(path string) (Result, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return Result{}, fmt.Errorf("agentstat: statfs %s: %w", path, err)
	}
	size := uint64(st.Frsize)
	if size == 0 {
		size = uint64(st.Bsize)
	}
	total := float64(st.Blocks * size)
	return Result{Used: float64((st.Blocks - st.Bfree) * size), Total: &total, Unit: "B"}, nil
}
