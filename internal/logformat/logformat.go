// Package logformat builds the log/slog handlers of the long-running
// commands (coder server, coder appliance up, coder provisionerd start):
// one readable line per record for a person at a terminal, one JSON object
// per line for log collectors. It only formats records; where they go and
// from which level on is the caller's choice.
//
// The text form is
//
//	2026-11-23 16:00:00.123 INFO  coderd.api: first user created username=admin
//
// local time to the millisecond, the level padded to five characters, the
// logger's "component" attributes (joined with dots when loggers nest)
// before the message, then key=value pairs, values quoted when they hold
// spaces, quotes, '=' or control characters. Attributes in groups are
// written as group.key=value. With TextOptions.UTC the time is UTC and one
// field, 2026-11-23T16:00:00.123Z, for lines read away from the machine
// (package logring keeps such lines); TextOptions.ReplaceAttr rewrites or
// drops attributes as slog's handlers do (logring redacts with it).
package logformat

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Format is how log records are written. It implements pflag.Value, so a
// --log-format flag refuses anything else when it is set.
type Format string

// Formats.
const (
	// Auto is Text when the output is a terminal and JSON otherwise.
	Auto Format = "auto"
	// Text is one human-readable line per record.
	Text Format = "text"
	// JSON is slog's JSON handler: one object per line.
	JSON Format = "json"
)

// Parse reads a format name; "" means Auto.
func Parse(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case "":
		return Auto, nil
	case Auto, Text, JSON:
		return f, nil
	}
	return "", fmt.Errorf("logformat: unknown log format %q: want text, json or auto", s)
}

// String returns the format's name (Auto for the zero value).
func (f Format) String() string {
	if f == "" {
		return string(Auto)
	}
	return string(f)
}

// Set parses s into f.
func (f *Format) Set(s string) error {
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// Type names the flag's value in help output.
func (f *Format) Type() string { return "text|json" }

// NewHandler returns the handler for f writing to w. tty says whether w is
// a terminal, which is what Auto decides by. opts may be nil; the text
// handler honours its Level, and its ReplaceAttr for attributes (see
// TextOptions).
func NewHandler(w io.Writer, f Format, tty bool, opts *slog.HandlerOptions) slog.Handler {
	if f == Text || (f != JSON && tty) {
		var topts TextOptions
		if opts != nil {
			topts = TextOptions{Level: opts.Level, ReplaceAttr: opts.ReplaceAttr}
		}
		return NewTextHandler(w, &topts)
	}
	return slog.NewJSONHandler(w, opts)
}

// TextOptions configure a TextHandler. The zero value writes records from
// Info on, with local times.
type TextOptions struct {
	// Level is the lowest level written (nil: Info).
	Level slog.Leveler
	// ReplaceAttr, when not nil, is called as slog.HandlerOptions'
	// ReplaceAttr is: for each attribute that is not a group, its value
	// resolved, with the groups it is in; what it returns is written
	// instead, and an empty Attr is dropped. It is not called for the
	// record's time, level and message, which have fixed places in the
	// line. A top-level "component" attribute is told after it returns.
	ReplaceAttr func(groups []string, a slog.Attr) slog.Attr
	// UTC writes times in UTC: the record's as 2006-01-02T15:04:05.000Z,
	// one field, and time values as RFC 3339 in UTC. False writes the
	// record's time in local time as 2006-01-02 15:04:05.000 and time
	// values in their own zone.
	UTC bool
}

// TextHandler writes records as readable lines (see the package comment).
// It is safe for concurrent use; each record is one Write of one line,
// ended by "\n".
type TextHandler struct {
	w    io.Writer
	mu   *sync.Mutex
	opts TextOptions
	// component is the loggers' "component" attributes, joined by dots.
	component string
	// attrs are the loggers' other attributes, already formatted.
	attrs []byte
	// groups are the open groups, outermost first.
	groups []string
}

// NewTextHandler returns a TextHandler writing to w. opts may be nil (the
// zero TextOptions).
func NewTextHandler(w io.Writer, opts *TextOptions) *TextHandler {
	h := &TextHandler{w: w, mu: &sync.Mutex{}}
	if opts != nil {
		h.opts = *opts
	}
	if h.opts.Level == nil {
		h.opts.Level = slog.LevelInfo
	}
	return h
}

// Enabled reports whether records of level l are written.
func (h *TextHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.opts.Level.Level()
}

// WithAttrs returns a handler that writes attrs with every record.
func (h *TextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = slices.Clip(h.attrs)
	for _, a := range attrs {
		h2.attrs = h.appendAttr(h2.attrs, &h2.component, h.groups, a)
	}
	return &h2
}

// WithGroup returns a handler that qualifies later keys with name.
func (h *TextHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.groups = append(slices.Clip(h.groups), name)
	return &h2
}

// Handle writes r as one line.
func (h *TextHandler) Handle(_ context.Context, r slog.Record) error {
	buf := make([]byte, 0, 256)
	if !r.Time.IsZero() {
		if h.opts.UTC {
			buf = r.Time.UTC().AppendFormat(buf, "2006-01-02T15:04:05.000Z")
		} else {
			buf = r.Time.Local().AppendFormat(buf, "2006-01-02 15:04:05.000")
		}
		buf = append(buf, ' ')
	}
	level := r.Level.String()
	buf = append(buf, level...)
	for i := len(level); i < 5; i++ {
		buf = append(buf, ' ')
	}
	buf = append(buf, ' ')
	component := h.component
	var attrs []byte
	r.Attrs(func(a slog.Attr) bool {
		attrs = h.appendAttr(attrs, &component, h.groups, a)
		return true
	})
	if component != "" {
		buf = append(buf, component...)
		buf = append(buf, ": "...)
	}
	buf = append(buf, r.Message...)
	buf = append(buf, h.attrs...)
	buf = append(buf, attrs...)
	buf = append(buf, '\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(buf)
	return err
}

// appendAttr appends " key=value" for a after ReplaceAttr (groups
// flattened into dotted keys). When component is not nil (a is a
// logger's or record's own attribute) and no group is open, a string
// "component" attribute is joined to *component instead.
func (h *TextHandler) appendAttr(buf []byte, component *string, groups []string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if h.opts.ReplaceAttr != nil && a.Value.Kind() != slog.KindGroup {
		a = h.opts.ReplaceAttr(groups, a)
		a.Value = a.Value.Resolve()
	}
	if a.Equal(slog.Attr{}) {
		return buf
	}
	if a.Value.Kind() == slog.KindGroup {
		if a.Key != "" {
			groups = append(slices.Clip(groups), a.Key)
		}
		for _, g := range a.Value.Group() {
			buf = h.appendAttr(buf, nil, groups, g)
		}
		return buf
	}
	if component != nil && len(groups) == 0 && a.Key == "component" && a.Value.Kind() == slog.KindString && a.Value.String() != "" {
		*component = joinComponent(*component, a.Value.String())
		return buf
	}
	buf = append(buf, ' ')
	for _, g := range groups {
		buf = append(buf, g...)
		buf = append(buf, '.')
	}
	buf = append(buf, a.Key...)
	buf = append(buf, '=')
	return h.appendValue(buf, a.Value)
}

func joinComponent(outer, inner string) string {
	if outer == "" {
		return inner
	}
	return outer + "." + inner
}

func (h *TextHandler) appendValue(buf []byte, v slog.Value) []byte {
	switch v.Kind() {
	case slog.KindString:
		return appendString(buf, v.String())
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
		t := v.Time()
		if h.opts.UTC {
			t = t.UTC()
		}
		return t.AppendFormat(buf, time.RFC3339Nano)
	}
	// fmt uses Error and String methods and survives their panics.
	return appendString(buf, fmt.Sprint(v.Any()))
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
