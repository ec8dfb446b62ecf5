package templatetar

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// Extract unpacks the template tar read from r into dir, which must be an
// existing, empty directory. It checks the same rules as Validate while it
// writes, reading at most maxSize bytes (DefaultMaxSize if maxSize <= 0).
// On any error it removes everything it wrote, leaving dir empty, and
// returns an error that names the offending entry.
//
// Files are created 0755 if their header has an execute bit and 0644
// otherwise; directories 0755 less the umask. All writes go through an
// [os.Root] on dir.
func Extract(r io.Reader, dir string, maxSize int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	defer root.Close()
	if err := checkEmpty(root); err != nil {
		return fmt.Errorf("extract into %s: %w", dir, err)
	}

	x := &extractor{root: root, top: make(map[string]bool)}
	if _, err := scan(r, maxSize, x.write); err != nil {
		if rmErr := x.removeAll(); rmErr != nil {
			return errors.Join(err, fmt.Errorf("clean up %s: %w", dir, rmErr))
		}
		return err
	}
	return nil
}

// checkEmpty returns an error unless root is an empty directory.
func checkEmpty(root *os.Root) error {
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && err != io.EOF {
		return err
	}
	if len(names) > 0 {
		return errors.New("directory is not empty")
	}
	return nil
}

// extractor writes accepted entries under root and remembers the top-level
// names it created, so that a failed extraction can be undone.
type extractor struct {
	root *os.Root
	top  map[string]bool
}

func (x *extractor) write(e entry) error {
	x.created(e.path)
	if e.dir {
		if err := x.root.MkdirAll(e.path, 0o755); err != nil {
			return fmt.Errorf("create directory %s: %w", quote(e.path), err)
		}
		return nil
	}
	if parent := path.Dir(e.path); parent != "." {
		if err := x.root.MkdirAll(parent, 0o755); err != nil {
			return fmt.Errorf("create directory %s: %w", quote(parent), err)
		}
	}
	var mode os.FileMode = 0o644
	if e.exec {
		mode = 0o755
	}
	f, err := x.root.OpenFile(e.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("create %s: %w", quote(e.path), err)
	}
	_, err = io.Copy(f, e.body)
	if err == nil {
		err = f.Chmod(mode) // Exactly this mode, whatever the umask.
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", quote(e.path), err)
	}
	return nil
}

// created records the top-level name of p before anything is made there.
func (x *extractor) created(p string) {
	top, _, _ := strings.Cut(p, "/")
	x.top[top] = true
}

// removeAll removes every top-level name the extractor created. The folder
// was empty before, so this empties it again.
func (x *extractor) removeAll() error {
	var errs []error
	for t := range x.top {
		if err := x.root.RemoveAll(t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
