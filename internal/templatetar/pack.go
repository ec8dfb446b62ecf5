package templatetar

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Pack writes the template folder dir to w as a deterministic tar (see the
// package comment) of at most maxSize bytes (DefaultMaxSize if
// maxSize <= 0).
//
// It stores regular files and directories, and skips every entry named
// ".terraform" and every entry matching "*.tfstate*" (state files, their
// backups and workspace state folders). A symbolic link whose target stays
// inside dir is stored as what it points to: a file's contents, or a
// directory's entries. A link that leaves dir is ErrUnsafePath; a link that
// loops is an error. Devices, FIFOs and sockets are ErrUnsupportedType, a
// folder without regular files is ErrEmpty, and names that Validate would
// refuse are ErrUnsafePath.
//
// If the tar would exceed maxSize, Pack stops with ErrTooLarge. On any
// error, w may have received the start of the archive.
func Pack(dir string, w io.Writer, maxSize int64) error {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("pack %s: %w", dir, err)
	}
	if root, err = filepath.Abs(root); err != nil {
		return fmt.Errorf("pack %s: %w", dir, err)
	}
	info, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("pack %s: %w", dir, err)
	}
	if !info.IsDir() {
		return fmt.Errorf("pack %s: not a directory", dir)
	}

	lw := &limitWriter{w: w, max: limit(maxSize)}
	p := &packer{dir: dir, root: root, tw: tar.NewWriter(lw)}
	err = p.walk(root, "", []string{root})
	if err == nil && p.files == 0 {
		err = fmt.Errorf("%w: %s", ErrEmpty, dir)
	}
	if err == nil {
		err = p.tw.Close()
	}
	if lw.exceeded {
		return fmt.Errorf("%w: over the limit of %d bytes at %q", ErrTooLarge, lw.max, p.current)
	}
	return err
}

// epoch is the modification time of every entry Pack writes.
var epoch = time.Unix(0, 0)

// packer holds the state of one Pack call.
type packer struct {
	dir     string // as given, for messages
	root    string // dir with symbolic links resolved
	tw      *tar.Writer
	files   int
	current string // archive name being written, for messages
}

// walk writes the entries of the directory at real path osDir under the
// archive name prefix ("" or ending in "/"). stack holds the real paths of
// the directories being walked, to catch symbolic link loops.
func (p *packer) walk(osDir, prefix string, stack []string) error {
	ents, err := os.ReadDir(osDir) // Sorted by name.
	if err != nil {
		return fmt.Errorf("read directory %q: %w", filepath.Join(p.dir, prefix), err)
	}
	for _, de := range ents {
		name := de.Name()
		if skip(name) {
			continue
		}
		arch := prefix + name
		if reason := unsafeReason(arch); reason != "" {
			return fmt.Errorf("%w: %q: %s", ErrUnsafePath, arch, reason)
		}
		osPath := filepath.Join(osDir, name)
		info, err := os.Lstat(osPath)
		if err != nil {
			return fmt.Errorf("stat %q: %w", arch, err)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			if osPath, info, err = p.follow(osPath, arch); err != nil {
				return err
			}
		}
		switch {
		case info.Mode().IsRegular():
			if err := p.file(arch, osPath, info); err != nil {
				return err
			}
		case info.IsDir():
			if slices.Contains(stack, osPath) {
				return fmt.Errorf("pack %q: symbolic link loop", arch)
			}
			if err := p.header(&tar.Header{Typeflag: tar.TypeDir, Name: arch + "/", Mode: 0o755}); err != nil {
				return err
			}
			if err := p.walk(osPath, arch+"/", append(stack, osPath)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: %q is a %s", ErrUnsupportedType, arch, fileType(info.Mode()))
		}
	}
	return nil
}

// follow resolves the symbolic link at osPath, returning its real path and
// what it points to, or an error if it points outside the folder.
func (p *packer) follow(osPath, arch string) (string, fs.FileInfo, error) {
	target, err := os.Readlink(osPath)
	if err != nil {
		return "", nil, fmt.Errorf("read link %q: %w", arch, err)
	}
	resolved, err := filepath.EvalSymlinks(osPath)
	if err != nil {
		return "", nil, fmt.Errorf("follow link %q -> %q: %w", arch, target, err)
	}
	if rel, err := filepath.Rel(p.root, resolved); err != nil || !filepath.IsLocal(rel) {
		return "", nil, fmt.Errorf("%w: symbolic link %q -> %q leaves %s", ErrUnsafePath, arch, target, p.dir)
	}
	info, err := os.Stat(resolved)
	if err != nil {
		return "", nil, fmt.Errorf("follow link %q -> %q: %w", arch, target, err)
	}
	return resolved, info, nil
}

// file writes the regular file at osPath under the archive name arch.
func (p *packer) file(arch, osPath string, info fs.FileInfo) error {
	var mode int64 = 0o644
	if info.Mode()&0o111 != 0 {
		mode = 0o755
	}
	f, err := os.Open(osPath)
	if err != nil {
		return fmt.Errorf("open %q: %w", arch, err)
	}
	defer f.Close()
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: arch, Mode: mode, Size: info.Size()}
	if err := p.header(hdr); err != nil {
		return err
	}
	n, err := io.CopyN(p.tw, f, hdr.Size)
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("pack %q: file shrank from %d to %d bytes while packing", arch, hdr.Size, n)
	}
	if err != nil {
		return fmt.Errorf("pack %q: %w", arch, err)
	}
	p.files++
	return nil
}

// header fills in the fixed fields of hdr and writes it.
func (p *packer) header(hdr *tar.Header) error {
	p.current = hdr.Name
	hdr.ModTime = epoch
	if err := p.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("pack %q: %w", hdr.Name, err)
	}
	return nil
}

// fileType names the type of a file that is neither regular nor a
// directory.
func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	default:
		return "irregular file"
	}
}

// skip reports whether Pack leaves out an entry with this base name:
// Terraform's working folder and state files.
func skip(name string) bool {
	if name == ".terraform" {
		return true
	}
	ok, _ := filepath.Match("*.tfstate*", name)
	return ok
}

// limitWriter passes writes to w until max bytes would be exceeded, then
// fails with ErrTooLarge.
type limitWriter struct {
	w        io.Writer
	max      int64
	n        int64
	exceeded bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.exceeded || int64(len(p)) > l.max-l.n {
		l.exceeded = true
		return 0, ErrTooLarge
	}
	n, err := l.w.Write(p)
	l.n += int64(n)
	return n, err
}
