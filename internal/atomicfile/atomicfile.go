// Package atomicfile writes files so that readers see the old content or
// the new, never a mix: a temp file in the same folder, fsync, rename, and an
// fsync of the folder so the rename survives a crash.
package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with data, created with mode.
func Write(path string, data []byte, mode os.FileMode) error {
	return WriteFunc(path, mode, func(w io.Writer) error {
		_, err := io.Copy(w, bytes.NewReader(data))
		return err
	})
}

// WriteFunc replaces path with what write writes, created with mode. On any
// error path is left as it was and the temp file is removed.
func WriteFunc(path string, mode os.FileMode, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = write(tmp); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	_ = SyncDir(dir)
	return nil
}

// SyncDir makes the creations, renames and removals in dir durable: it
// fsyncs the folder. A file system that cannot sync a folder is not an
// error.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	return nil
}
