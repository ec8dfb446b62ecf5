// Package logring keeps the newest log records of this process in memory,
// as redacted text lines, so that an owner can read them through the API
// (GET /api/v2/debug/logs) and `coder support bundle` can carry them out of
// the gap. A Handler wraps the process's slog handler: every record still
// goes where it went (stderr, the journal) unchanged, and a copy at or
// above the ring's level becomes one line in a Ring of fixed size, the
// oldest dropped first.
//
// A line is
//
//	2026-11-23T16:00:00.123Z INFO  coderd.api: first user created username=admin
//
// the record's time in UTC to the millisecond, the level padded to five
// characters, the loggers' "component" attributes joined with dots, the
// message, then key=value pairs (groups as group.key=value), values quoted
// when they hold spaces, quotes, '=' or control characters.
//
// The copy is redacted (package redact) before it is formatted: the value
// of an attribute whose name says secret (password, token, psk, key, …)
// becomes "[redacted]", and the message and every other value lose URL
// passwords, secret=value pairs, credentials and private keys. The ring
// must never hold what the journal would not show an owner, and less.
// It does not read or write files and starts no goroutines.
package logring

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode"

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
	next  slog.Handler
	ring  *Ring
	level slog.Leveler
	// component is the loggers' "component" attributes, joined by dots.
	component string
	// attrs are the loggers' other attributes, redacted and formatted.
	attrs []byte
	// prefix qualifies keys with the open groups ("g1.g2.").
	prefix string
}

// NewHandler wraps next (which gets every record it is enabled for, as
// before) so that records at level or above (nil: Info) are kept in ring.
func NewHandler(next slog.Handler, ring *Ring, level slog.Leveler) *Handler {
	if level == nil {
		level = slog.LevelInfo
	}
	return &Handler{next: next, ring: ring, level: level}
}

// Enabled reports whether next or the ring wants records of level l.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level.Level() || h.next.Enabled(ctx, l)
}

// Handle passes r to next (when next is enabled for its level) and keeps a
// line of it (when the ring is).
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if h.next.Enabled(ctx, r.Level) {
		err = h.next.Handle(ctx, r)
	}
	if r.Level >= h.level.Level() {
		h.ring.Add(h.format(r))
	}
	return err
}

// WithAttrs returns a handler that adds attrs to every record.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	h2.next = h.next.WithAttrs(attrs)
	h2.attrs = slices.Clip(h.attrs)
	for _, a := range attrs {
		if c, ok := h.componentOf(a); ok {
			h2.component = joinComponent(h2.component, c)
			continue
		}
		h2.attrs = appendAttr(h2.attrs, h.prefix, a)
	}
	return &h2
}

// WithGroup returns a handler that qualifies later keys with name.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.next = h.next.WithGroup(name)
	h2.prefix += name + "."
	return &h2
}

// format is r as one line (see the package comment), without a newline.
func (h *Handler) format(r slog.Record) string {
	buf := make([]byte, 0, 256)
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	buf = t.UTC().AppendFormat(buf, "2006-01-02T15:04:05.000Z")
	buf = append(buf, ' ')
	level := r.Level.String()
	buf = append(buf, level...)
	for i := len(level); i < 5; i++ {
		buf = append(buf, ' ')
	}
	buf = append(buf, ' ')
	component := h.component
	var attrs []byte
	r.Attrs(func(a slog.Attr) bool {
		if c, ok := h.componentOf(a); ok {
			component = joinComponent(component, c)
		} else {
			attrs = appendAttr(attrs, h.prefix, a)
		}
		return true
	})
	if component != "" {
		buf = append(buf, component...)
		buf = append(buf, ": "...)
	}
	buf = append(buf, redact.String(r.Message)...)
	buf = append(buf, h.attrs...)
	buf = append(buf, attrs...)
	return string(buf)
}

// componentOf returns the value of a top-level "component" attribute.
func (h *Handler) componentOf(a slog.Attr) (string, bool) {
	if h.prefix != "" || a.Key != "component" {
		return "", false
	}
	v := a.Value.Resolve()
	if v.Kind() != slog.KindString || v.String() == "" {
		return "", false
	}
	return redact.String(v.String()), true
}

func joinComponent(outer, inner string) string {
	if outer == "" {
		return inner
	}
	return outer + "." + inner
}

// appendAttr appends " key=value", redacted (groups flattened into dotted
// keys).
func appendAttr(buf []byte, prefix string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return buf
	}
	if a.Value.Kind() == slog.KindGroup {
		if a.Key != "" {
			prefix += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			buf = appendAttr(buf, prefix, g)
		}
		return buf
	}
	key := prefix + a.Key
	buf = append(buf, ' ')
	buf = append(buf, redact.String(key)...)
	buf = append(buf, '=')
	return appendValue(buf, key, a.Value)
}

// appendValue appends v. Strings and other values printed as text are
// redacted: wholly when key names a secret; numbers, booleans, durations
// and times never are.
func appendValue(buf []byte, key string, v slog.Value) []byte {
	switch v.Kind() {
	case slog.KindString:
		return appendString(buf, redact.Value(key, v.String()))
	case slog.KindInt64:
		return strconv.AppendInt(buf, v.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(buf, v.Uint64(), 10)
	case slog.KindFloat64:
		return strconv.AppendFloat(buf, v.Float64(), 'g', -1, 64)
	case slog.KindBool:
		return strconv.AppendBool(buf, v.Bool())
	case slog.KindDuration:
		return append(buf, v.Duration().String()...)
	case slog.KindTime:
		return v.Time().UTC().AppendFormat(buf, time.RFC3339Nano)
	}
	// fmt uses Error and String methods and survives their panics.
	return appendString(buf, redact.Value(key, fmt.Sprint(v.Any())))
}

// appendString appends s, quoted when it would not read as one value.
func appendString(buf []byte, s string) []byte {
	if needsQuote(s) {
		return strconv.AppendQuote(buf, s)
	}
	return append(buf, s...)
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s {
		if r == '"' || r == '=' || r == '\\' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
	}
	return false
}
