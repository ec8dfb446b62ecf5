// Package templatetar packs, validates and unpacks Terraform template
// archives.
//
// A template is a folder of Terraform files. It reaches the control plane as
// a tar stream: the CLI packs the folder ([Pack], for `coder templates push`),
// the server checks the upload before storing it ([Validate], for
// POST /api/v2/files), and a provisioner unpacks it into a fresh work folder
// ([Extract]). This package is the one place that does any of the three.
// It does not compress, store, hash or interpret the files it carries.
//
// # Trust model
//
// An uploaded tar is hostile input: its names, types and sizes are chosen by
// whoever uploads it. The server validates it on upload, but the provisioner
// does not rely on that check: Extract applies the same rules again while it
// writes, so a stored file that skipped validation or was changed later is
// held to the same standard. Extract writes only through an [os.Root] opened
// on the target folder, so even a bug in the name rules cannot write outside
// it.
//
// Pack reads a folder its user owns and trusts it, except that it refuses
// symbolic links that leave the folder, so a push never uploads files from
// outside the template, and names the other two would refuse.
//
// # Rules
//
// Validate and Extract accept a tar only if all of these hold:
//
//   - Size. At most maxSize bytes are read from the underlying reader, tar
//     headers and padding included; one more byte is ErrTooLarge. The sizes
//     declared by the file headers must not add up to more than maxSize
//     either, so a header cannot promise more data than the stream may carry.
//     Nor may the archive name more than maxSize/512 paths, parent folders
//     implied by deep names included: no more than it could hold headers.
//     Memory use does not depend on declared sizes: contents are streamed.
//   - Names. Relative, slash-separated, valid UTF-8 without control
//     characters or backslashes, no ".." element, at most 4096 bytes with
//     elements of at most 255 bytes. A leading "./" is allowed. Otherwise
//     ErrUnsafePath.
//   - Types. Regular files and directories only. Symbolic links, hard links
//     (any target), devices, FIFOs and sparse files are ErrUnsupportedType.
//     PAX global headers (as written by `git archive`) are ignored.
//   - Uniqueness. Every path appears once, and no path is both a file and a
//     directory; otherwise ErrDuplicatePath.
//   - Content. At least one regular file (ErrEmpty); an empty stream is an
//     empty tar. A stream that does not parse, lacks the end-of-archive
//     marker (is cut short) or has anything but zeros after it is ErrNotTar.
//
// Extract keeps only the executable distinction of file modes: a file is
// 0755 if its header has any execute bit and 0644 otherwise. Directories are
// created 0755 (less the umask). Owners, times, extended attributes and
// other mode bits are dropped.
//
// # Pack format
//
// Pack writes a deterministic tar: entries in lexical order of their names
// within each directory, directories before their contents, every
// modification time at the Unix epoch, uid and gid 0, no user or group
// names, modes 0755 for directories and executables and 0644 for other
// files. The same folder contents always give the same bytes.
package templatetar

import "errors"

// DefaultMaxSize is the limit, in bytes of tar stream, used when a function
// is given a maxSize of zero or less. It matches the control plane's file
// upload limit.
const DefaultMaxSize = 10 << 20

// Errors returned by Pack, Validate and Extract, wrapped with the name of
// the offending entry. Test for them with [errors.Is].
var (
	// ErrTooLarge means the tar stream, or the file sizes its headers
	// declare, exceed the size limit.
	ErrTooLarge = errors.New("templatetar: archive too large")
	// ErrUnsafePath means an entry name could resolve outside the template
	// folder (absolute, "..", backslashes) or is otherwise unfit for a
	// file name (control characters, invalid UTF-8, too long). For Pack it
	// also means a symbolic link that leaves the folder.
	ErrUnsafePath = errors.New("templatetar: unsafe path")
	// ErrUnsupportedType means an entry is neither a regular file nor a
	// directory.
	ErrUnsupportedType = errors.New("templatetar: unsupported entry type")
	// ErrDuplicatePath means a path appears twice, or is both a file and a
	// directory.
	ErrDuplicatePath = errors.New("templatetar: duplicate path")
	// ErrNotTar means the stream does not parse as a tar archive, is
	// truncated, or has data after the end-of-archive marker.
	ErrNotTar = errors.New("templatetar: not a tar archive")
	// ErrEmpty means the archive, or the folder given to Pack, holds no
	// regular file.
	ErrEmpty = errors.New("templatetar: template has no files")
)

// limit returns maxSize, or DefaultMaxSize if maxSize is not positive.
func limit(maxSize int64) int64 {
	if maxSize <= 0 {
		return DefaultMaxSize
	}
	return maxSize
}
