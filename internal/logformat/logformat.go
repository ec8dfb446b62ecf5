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
// written as group.key=value.
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
// handler honours only its Level.
func NewHandler(w io.Writer, f Format, tty bool, opts *slog.HandlerOptions) slog.Handler {
	if f == Text || (f != JSON && tty) {
		return NewTextHandler(w, opts)
	}
	return slog.NewJSONHandler(w, opts)
}

// TextHandler writes records as readable lines (see the package comment).
// It is safe for concurrent use; each record is one Write.
type TextHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	level slog.Leveler
	// component is the loggers' "component" attributes, joined by dots.
	component string
	// attrs are the loggers' other attributes, already formatted.
	attrs []byte
	// prefix qualifies keys with the open groups ("g1.g2.").
	prefix string
}

// NewTextHandler returns a TextHandler writing to w. opts may be nil (level
// Info).
func NewTextHandler(w io.Writer, opts *slog.HandlerOptions) *TextHandler {
	var level slog.Leveler = slog.LevelInfo
	if opts != nil && opts.Level != nil {
		level = opts.Level
	}
	return &TextHandler{w: w, mu: &sync.Mutex{}, level: level}
}

// Enabled reports whether records of level l are written.
func (h *TextHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

// WithAttrs returns a handler that writes attrs with every record.
func (h *TextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
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
func (h *TextHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.prefix += name + "."
	return &h2
}

// Handle writes r as one line.
func (h *TextHandler) Handle(_ context.Context, r slog.Record) error {
	buf := make([]byte, 0, 256)
	if !r.Time.IsZero() {
		buf = r.Time.Local().AppendFormat(buf, "2006-01-02 15:04:05.000")
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
	buf = append(buf, r.Message...)
	buf = append(buf, h.attrs...)
	buf = append(buf, attrs...)
	buf = append(buf, '\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(buf)
	return err
}

// componentOf returns the value of a top-level "component" attribute.
func (h *TextHandler) componentOf(a slog.Attr) (string, bool) {
	if h.prefix != "" || a.Key != "component" {
		return "", false
	}
	v := a.Value.Resolve()
	if v.Kind() != slog.KindString || v.String() == "" {
		return "", false
	}
	return v.String(), true
}

func joinComponent(outer, inner string) string {
	if outer == "" {
		return inner
	}
	return outer + "." + inner
}

// appendAttr appends " key=value" (groups flattened into dotted keys).
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
	buf = append(buf, ' ')
	buf = append(buf, prefix...)
	buf = append(buf, a.Key...)
	buf = append(buf, '=')
	return appendValue(buf, a.Value)
}

func appendValue(buf []byte, v slog.Value) []byte {
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
		return v.Time().AppendFormat(buf, time.RFC3339Nano)
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
