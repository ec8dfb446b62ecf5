package auditjournal

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrUnknownVersion reports a line in a format version newer than
// Version: a newer release wrote it (an appliance command of a release the
// server was then rolled back from). It is left for a release that reads
// that version.
var ErrUnknownVersion = errors.New("auditjournal: format version newer than this release reads")

// LineError is a line Next could not read. Reading may go on after it.
type LineError struct {
	// Offset is where the line starts, in bytes from the start of the
	// journal.
	Offset int64
	// Version is the line's format version when it names one it can be
	// told by (0 otherwise).
	Version int
	// Err is ErrUnknownVersion, or what is wrong with the line (a torn
	// write, a member missing).
	Err error
}

func (e *LineError) Error() string {
	if errors.Is(e.Err, ErrUnknownVersion) {
		return fmt.Sprintf("auditjournal: the record at byte %d is in format version %d; this release reads versions up to %d (a newer release wrote it: the journal keeps it for a release that reads it)",
			e.Offset, e.Version, Version)
	}
	return fmt.Sprintf("auditjournal: the line at byte %d is not a record: %v", e.Offset, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// Reader reads a journal's records in the order they were written. It
// holds a shared lock on the journal until Close: appends wait meanwhile,
// so none is read half-written.
type Reader struct {
	f   *os.File
	r   *bufio.Reader
	off int64
}

// OpenReader opens the journal at path to read from offset, a position
// Offset returned earlier. An offset outside the journal (the journal was
// replaced, or the position came from another appliance's database) reads
// from the start (the server skips, by id, what it stored already). A
// missing journal is an error that satisfies errors.Is(err,
// fs.ErrNotExist).
func OpenReader(path string, offset int64) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auditjournal: %w", err)
	}
	if err := flock(f, syscall.LOCK_SH); err != nil {
		_ = f.Close()
		return nil, err
	}
	r := &Reader{f: f, off: offset}
	st, err := f.Stat()
	if err == nil && (offset < 0 || offset > st.Size()) {
		r.off = 0
	}
	if err == nil {
		_, err = f.Seek(r.off, io.SeekStart)
	}
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("auditjournal: %w", err)
	}
	r.r = bufio.NewReader(f)
	return r, nil
}

// Next returns the next record. It returns io.EOF when no whole line is
// left: a last line without its newline is being written, or was torn by
// a crash, and is not read. A line it cannot read is a *LineError (use
// errors.Is with ErrUnknownVersion to tell a newer format from a broken
// line); the next call reads the line after it.
func (r *Reader) Next() (Record, error) {
	line, err := r.r.ReadBytes('\n')
	if err == io.EOF {
		return Record{}, io.EOF
	}
	if err != nil {
		return Record{}, fmt.Errorf("auditjournal: read %s: %w", r.f.Name(), err)
	}
	start := r.off
	r.off += int64(len(line))
	rec, v, err := decode(line)
	if err != nil {
		return Record{}, &LineError{Offset: start, Version: v, Err: err}
	}
	return rec, nil
}

// Offset is the position after the last line Next has read (or skipped):
// where to start the next read of this journal.
func (r *Reader) Offset() int64 { return r.off }

// Close releases the lock and closes the journal.
func (r *Reader) Close() error {
	unlock(r.f)
	return r.f.Close()
}

// decode reads one line, of any version up to Version, and the version it
// is in.
func decode(line []byte) (Record, int, error) {
	var probe struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return Record{}, 0, err
	}
	v := 0 // no "v": written before versions existed
	if probe.V != nil {
		v = *probe.V
	}
	switch {
	case v > Version:
		return Record{}, v, ErrUnknownVersion
	case probe.V != nil && v != 1:
		return Record{}, v, fmt.Errorf("there is no format version %d", v)
	}
	// Record is version 1, and version 0 is version 1 without "v" (V stays
	// 0), so one type reads both. When Version moves on, version 1 gets a
	// type of its own here, frozen, and it reads versions 0 and 1.
	var rec Record
	if err := json.Unmarshal(line, &rec); err != nil {
		return Record{}, v, err
	}
	if err := check(rec); err != nil {
		return Record{}, v, err
	}
	return rec, v, nil
}
