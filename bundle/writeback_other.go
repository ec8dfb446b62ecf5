//go:build !linux

package bundle

import "os"

// writeBehind is a no-op where sync_file_range does not exist: the bundle
// file's bytes reach the disk at its fsync.
type writeBehind struct{}

func newWriteBehind(*os.File) *writeBehind { return &writeBehind{} }

func (*writeBehind) wrote(int64) {}

func (*writeBehind) stop() {}
