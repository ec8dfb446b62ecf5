// Package logring keeps the newest log records of this process in memory,
// as redacted text lines, so that an owner can read them through the API
// (GET /api/v2/debug/logs) and `coder support bundle` can carry them out of
// the gap. A Handler wraps the process's slog handler: every record still
// goes where it went (stderr, the journal) unchanged, and a copy at or
// above the ring's level becomes one line in a Ring of fixed size, the
// oldest dropped first.
//
// A line is package logformat's text line with its time in UTC:
//
//	2026-11-23T16:00:00.123Z INFO  coderd.api: first user created username=admin
//
// the record's time in UTC to the millisecond, the level padded to five
// characters, the loggers' "component" attributes joined with dots, the
// message, then key=value pairs (groups as group.key=value), values quoted
// when they hold spaces, quotes, '=' or control characters.
//
// The copy is redacted (package redact) twice: each attribute's value
// before it is quoted (the whole value, "[redacted]", when the attribute's
// name says secret: password, token, psk, key, …; URL passwords,
// secret=value pairs, credentials and private keys in any other text
// value), then the whole line, for the message and the keys. Numbers,
// booleans, durations and times are kept. The ring must never hold what
// the journal would not show an owner, and less. It does not read or
// write files and starts no goroutines.
package logring

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"airgapcoder/internal/logformat"
	"airgapcoder/internal/redact"
)

// DefaultSize is how many lines a ring of the CLI's long-running commands
// keeps.
const DefaultSize = 2000

// MaxLine caps one line (in bytes); a longer one is cut and ends in "…".
const MaxLine = 8 << 10

// Ring is a fixed-size ring of log lines, safe for concurrent use. The zero
// value is not usable: construct it with New.
type Ring struct {
	mu    sync.Mutex
	lines []string
	next  int  // where the next line goes
	full  bool // lines has wrapped around
	// dropped counts lines pushed out by newer ones.
	dropped uint64
}

// New returns a ring keeping the newest size lines (DefaultSize when size
// is 0 or less).
func New(size int) *Ring {
	if size <= 0 {
		size = DefaultSize
	}
	return &Ring{lines: make([]string, size)}
}

// Add appends a line (without its newline), cut to MaxLine, dropping the
// oldest when the ring is full.
func (r *Ring) Add(line string) {
	if len(line) > MaxLine {
		cut := MaxLine
		for cut > 0 && !utf8Start(line[cut]) {
			cut--
		}
		line = line[:cut] + "…"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full {
		r.dropped++
	}
	r.lines[r.next] = line
	r.next++
	if r.next == len(r.lines) {
		r.next, r.full = 0, true
	}
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// Lines returns the lines kept, oldest first, and how many older ones were
// dropped to make room.
func (r *Ring) Lines() (lines []string, dropped uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return slices.Clone(r.lines[:r.next]), 0
	}
	return append(slices.Clone(r.lines[r.next:]), r.lines[:r.next]...), r.dropped
}

// Handler passes every record to the handler it wraps and keeps a
// redacted line of each at or above its level in a Ring.
type Handler struct {
	next slog.Handler
	// text is a logformat.TextHandler writing to the ring.
	text slog.Handler
}

// NewHandler wraps next (which gets every record it is enabled for, as
// before) so that records at level or above (nil: Info) are kept in ring.
func NewHandler(next slog.Handler, ring *Ring, level slog.Leveler) *Handler {
	text := logformat.NewTextHandler(ringWriter{ring}, &logformat.TextOptions{Level: level, ReplaceAttr: redactAttr, UTC: true})
	return &Handler{next: next, text: text}
}

// Enabled reports whether next or the ring wants records of level l.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.text.Enabled(ctx, l) || h.next.Enabled(ctx, l)
}

// Handle passes r to next (when next is enabled for its level) and keeps a
// line of it (when the ring is).
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if h.next.Enabled(ctx, r.Level) {
		err = h.next.Handle(ctx, r)
	}
	if h.text.Enabled(ctx, r.Level) {
		_ = h.text.Handle(ctx, r) // ringWriter does not fail
	}
	return err
}

// WithAttrs returns a handler that adds attrs to every record.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), text: h.text.WithAttrs(attrs)}
}

// WithGroup returns a handler that qualifies later keys with name.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &Handler{next: h.next.WithGroup(name), text: h.text.WithGroup(name)}
}

// redactAttr is the text handler's ReplaceAttr: a string or other textual
// value becomes redact.Value of it under its dotted name (groups
// included), so secrets go before the value is quoted; numbers, booleans,
// durations and times are kept.
func redactAttr(groups []string, a slog.Attr) slog.Attr {
	var s string
	switch a.Value.Kind() {
	case slog.KindString:
		s = a.Value.String()
	case slog.KindAny:
		// fmt uses Error and String methods and survives their panics.
		s = fmt.Sprint(a.Value.Any())
	default:
		return a
	}
	name := a.Key
	if len(groups) > 0 {
		name = strings.Join(groups, ".") + "." + a.Key
	}
	return slog.String(a.Key, redact.Value(name, s))
}

// ringWriter keeps each line the text handler writes (one Write a line)
// in the ring, redacted as a whole for what redactAttr does not see: the
// message and the keys.
type ringWriter struct{ ring *Ring }

func (w ringWriter) Write(p []byte) (int, error) {
	w.ring.Add(redact.String(strings.TrimSuffix(string(p), "\n")))
	return len(p), nil
}
