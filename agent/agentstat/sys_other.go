//go:build !linux

package agentstat

import "io/fs"

func rootFS() (fs.FS, error) { return nil, ErrUnsupported }

// Disk reports the filesystem that holds path; on this system it answers
// ErrUnsupported.
func Disk(path string) (Result, error) { return Result{}, ErrUnsupported }
