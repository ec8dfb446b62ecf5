// Package atomicfile writes files so that readers see the old content or
// the new, never a mix: a temp file in the same folder, fsync, rename, and an
// fsync of the folder so the rename survives a crash.
//
// CreateNew is the other half, for staging folders that are renamed into
// place as a whole once complete (an unpacked bundle, a build's payload):
// it creates a file that must not exist yet, and removes it again when
// writing fails.
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

// CreateNew creates path, which must not exist (an existing file is never
// touched: the error then satisfies errors.Is(err, fs.ErrExist)), fills it
// with what write writes, gives it exactly mode (the umask does not apply),
// and fsyncs it. On any error the new file is removed. Unlike Write, the file
// is visible under its name while it is written, so it belongs in a folder
// that nobody reads before it is complete. The folder itself is not synced:
// the caller syncs it (SyncDir) once it has created what it creates there.
func CreateNew(path string, mode os.FileMode, write func(io.Writer) error) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(path)
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	return f.Close()
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
