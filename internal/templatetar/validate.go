package templatetar

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"slices"
	"strings"
)

// Summary describes an archive that Validate accepted.
type Summary struct {
	// Files is the number of regular files.
	Files int
	// Bytes is the total size of the regular files' contents, not of the
	// tar stream.
	Bytes int64
	// Paths lists every entry in archive order as a clean, slash-separated
	// path relative to the template folder. Directory paths end in "/".
	// The folder itself is not listed.
	Paths []string
}

// Validate reads the whole tar stream from r and checks it against the rules
// in the package comment, reading at most maxSize bytes (DefaultMaxSize if
// maxSize <= 0). It returns a summary of the archive, or the first rule
// broken as an error that names the offending entry and wraps one of the
// package's sentinel errors. Errors reading r are returned wrapped.
func Validate(r io.Reader, maxSize int64) (Summary, error) {
	sum, err := scan(r, maxSize, nil)
	if err != nil {
		return Summary{}, err
	}
	return sum, nil
}

// entry is one accepted archive member, as handed to a scan callback.
type entry struct {
	path string    // cleaned name, never "."
	dir  bool      // a directory; otherwise a regular file
	exec bool      // some execute bit is set in the header
	body io.Reader // file contents; nil for a directory
}

// pathKind records what a path is known to be while scanning.
type pathKind uint8

const (
	impliedDir  pathKind = iota + 1 // parent of an entry, not an entry itself
	explicitDir                     // a directory entry
	regularFile                     // a file entry
)

// scanner holds the state of one pass over an archive.
type scanner struct {
	in  *limitReader
	tr  *tar.Reader
	max int64
	// maxPaths bounds len(seen): an archive may not name more paths,
	// implied parent folders included, than it could hold headers.
	maxPaths int
	seen     map[string]pathKind
	sum      Summary
	last     string // name of the last entry read, for error messages
	end      int64  // stream offset where the last entry, padded, ends
}

// scan reads a template tar from r, checking every rule in the package
// comment, and calls fn (if not nil) for each accepted entry in archive
// order. fn may read e.body; scan discards what it leaves. An error from fn
// stops the scan and is returned, unless reading the archive failed, in
// which case that error is returned instead.
func scan(r io.Reader, maxSize int64, fn func(e entry) error) (Summary, error) {
	maxSize = limit(maxSize)
	in := &limitReader{r: r, max: maxSize}
	s := &scanner{
		in:       in,
		tr:       tar.NewReader(in),
		max:      maxSize,
		maxPaths: int(min(maxSize/blockSize, math.MaxInt32)),
		seen:     make(map[string]pathKind),
	}
	for {
		hdr, err := s.tr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, tar.ErrInsecurePath) && hdr != nil {
			err = nil // Set under GODEBUG=tarinsecurepath=0; names are checked below.
		}
		if err != nil {
			return s.sum, s.readError(err, "after")
		}
		s.last = hdr.Name
		if err := s.entry(hdr, fn); err != nil {
			return s.sum, err
		}
		s.end = (s.in.n + blockSize - 1) / blockSize * blockSize
	}
	// archive/tar also ends quietly when the stream stops between entries,
	// so check that the two zero blocks marking the end were read: a tar
	// cut short at a block boundary must not pass for a smaller template.
	if s.in.n > 0 && s.in.n-s.end < 2*blockSize {
		if s.last == "" {
			return s.sum, fmt.Errorf("%w: no end-of-archive marker", ErrNotTar)
		}
		return s.sum, fmt.Errorf("%w: truncated after entry %s: no end-of-archive marker", ErrNotTar, quote(s.last))
	}
	if err := s.trailer(); err != nil {
		return s.sum, err
	}
	if s.sum.Files == 0 {
		return s.sum, ErrEmpty
	}
	return s.sum, nil
}

// entry checks one header, records it, hands it to fn and reads its body.
func (s *scanner) entry(hdr *tar.Header, fn func(e entry) error) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil // Metadata for the whole archive, such as a git commit id.
	case tar.TypeReg, tar.TypeDir:
	default:
		return unsupported(hdr)
	}
	if sparse(hdr) {
		return fmt.Errorf("%w: %s is a sparse file", ErrUnsupportedType, quote(hdr.Name))
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	dir := hdr.Typeflag == tar.TypeDir
	if name == "." {
		if dir {
			return nil // The template folder itself, as in "./".
		}
		return fmt.Errorf("%w: %s: file names the template folder", ErrUnsafePath, quote(hdr.Name))
	}
	if !dir && hdr.Size > s.max-s.sum.Bytes {
		return fmt.Errorf("%w: entry %s declares %d bytes, over the limit of %d for all files",
			ErrTooLarge, quote(hdr.Name), hdr.Size, s.max)
	}
	if err := s.claim(hdr.Name, name, dir); err != nil {
		return err
	}

	e := entry{path: name, dir: dir, exec: hdr.Mode&0o111 != 0}
	var body *bodyReader
	if dir {
		s.sum.Paths = append(s.sum.Paths, name+"/")
	} else {
		s.sum.Paths = append(s.sum.Paths, name)
		body = &bodyReader{r: s.tr}
		e.body = body
	}
	if fn != nil {
		if err := fn(e); err != nil {
			if body != nil && body.err != nil {
				return s.readError(body.err, "in")
			}
			return err
		}
	}
	if body == nil {
		return nil
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return s.readError(err, "in")
	}
	s.sum.Files++
	s.sum.Bytes += body.n
	return nil
}

// claim records path p, the cleaned form of entry name raw, as a file or
// directory, rejecting a path seen before and a path whose parent is a file.
func (s *scanner) claim(raw, p string, dir bool) error {
	for parent := path.Dir(p); parent != "."; parent = path.Dir(parent) {
		k := s.seen[parent]
		if k == regularFile {
			return fmt.Errorf("%w: entry %s needs %s to be a directory, but it is a file",
				ErrDuplicatePath, quote(raw), quote(parent))
		}
		if k != 0 {
			break // Its ancestors were recorded along with it.
		}
		if err := s.record(raw, parent, impliedDir); err != nil {
			return err
		}
	}
	switch s.seen[p] {
	case 0:
	case impliedDir:
		if !dir {
			return fmt.Errorf("%w: entry %s is a file, but earlier entries make it a directory",
				ErrDuplicatePath, quote(raw))
		}
	default:
		if raw != p && raw != p+"/" {
			return fmt.Errorf("%w: entry %s: %s appears twice", ErrDuplicatePath, quote(raw), quote(p))
		}
		return fmt.Errorf("%w: entry %s appears twice", ErrDuplicatePath, quote(raw))
	}
	if dir {
		return s.record(raw, p, explicitDir)
	}
	return s.record(raw, p, regularFile)
}

// record notes what path p is, failing if that makes too many paths.
func (s *scanner) record(raw, p string, k pathKind) error {
	if _, ok := s.seen[p]; !ok && len(s.seen) >= s.maxPaths {
		return fmt.Errorf("%w: entry %s makes more than %d paths, the most a %d-byte archive can hold",
			ErrTooLarge, quote(raw), s.maxPaths, s.max)
	}
	s.seen[p] = k
	return nil
}

// trailer reads the rest of the stream after the end-of-archive marker,
// which must hold only zero padding.
func (s *scanner) trailer() error {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.in.Read(buf)
		if slices.ContainsFunc(buf[:n], func(b byte) bool { return b != 0 }) {
			return fmt.Errorf("%w: data after the end of the archive", ErrNotTar)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return s.readError(err, "after")
		}
	}
}

// readError classifies an error met while reading the archive: over the
// size limit, a failing reader, or a stream that is not a valid tar. where
// ("in" or "after") places it relative to the last entry read.
func (s *scanner) readError(err error, where string) error {
	at := "" // Where in the archive, for messages.
	if s.last != "" {
		at = fmt.Sprintf(" %s entry %s", where, quote(s.last))
	}
	switch {
	case s.in.exceeded:
		return fmt.Errorf("%w: stream is over the limit of %d bytes%s", ErrTooLarge, s.max, at)
	case s.in.err != nil:
		return fmt.Errorf("read archive%s: %w", at, s.in.err)
	case errors.Is(err, io.EOF):
		err = io.ErrUnexpectedEOF // Truncated inside an entry or its padding.
	}
	if at != "" {
		return fmt.Errorf("%w:%s: %w", ErrNotTar, at, err)
	}
	return fmt.Errorf("%w: %w", ErrNotTar, err)
}

// unsupported returns the error for an entry of a type other than file or
// directory.
func unsupported(hdr *tar.Header) error {
	var what string
	switch hdr.Typeflag {
	case tar.TypeSymlink:
		what = "a symbolic link to " + quote(hdr.Linkname)
	case tar.TypeLink:
		what = "a hard link to " + quote(hdr.Linkname)
	case tar.TypeChar:
		what = "a character device"
	case tar.TypeBlock:
		what = "a block device"
	case tar.TypeFifo:
		what = "a FIFO"
	case tar.TypeGNUSparse:
		what = "a sparse file"
	default:
		what = fmt.Sprintf("of type %q", hdr.Typeflag)
	}
	return fmt.Errorf("%w: %s is %s", ErrUnsupportedType, quote(hdr.Name), what)
}

// sparse reports whether hdr describes a PAX-format GNU sparse file, whose
// logical size can far exceed the bytes it occupies in the stream.
func sparse(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// blockSize is the size of a tar header, the least an entry costs.
const blockSize = 512

// limitReader counts the bytes read from r and fails with ErrTooLarge once
// more than max have been read.
type limitReader struct {
	r        io.Reader
	max      int64
	n        int64 // bytes read so far
	exceeded bool  // more than max bytes were read
	err      error // first error from r other than io.EOF
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.exceeded {
		return 0, ErrTooLarge
	}
	// Read up to one byte past the limit: a stream of exactly max bytes is
	// fine, and one more proves it is too long.
	if room := l.max - l.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.max {
		l.exceeded = true
		return n, ErrTooLarge
	}
	if err != nil && err != io.EOF && l.err == nil {
		l.err = err
	}
	return n, err
}

// bodyReader reads one file's contents from the tar reader, counting bytes
// and keeping the first error other than io.EOF.
type bodyReader struct {
	r   io.Reader
	n   int64
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}
