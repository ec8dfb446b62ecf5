package postgres

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
)

// maxLogLine bounds a buffered line; longer ones are logged in pieces.
const maxLogLine = 64 << 10

// logWriter turns the helper's stderr (its own messages, initdb's and
// PostgreSQL's output) into one log record per line. The level follows
// PostgreSQL's severity when the line carries one.
type logWriter struct {
	log *slog.Logger

	mu  sync.Mutex
	buf []byte
}

func newLogWriter(log *slog.Logger) *logWriter {
	return &logWriter{log: log}
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > maxLogLine {
		w.emit(string(w.buf))
		w.buf = nil
	}
	return len(p), nil
}

// Flush logs a last line that had no newline.
func (w *logWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(string(w.buf))
		w.buf = nil
	}
}

func (w *logWriter) emit(line string) {
	line = strings.TrimRight(line, "\r")
	if strings.TrimSpace(line) == "" {
		return
	}
	w.log.Log(context.Background(), levelOf(line), line)
}

// levelOf maps PostgreSQL's severity ("... [123] FATAL:  ...") to a level.
func levelOf(line string) slog.Level {
	// Every fast shutdown ends the connection that the library's health
	// check leaves open (it never closes its rows).
	if strings.Contains(line, "terminating connection due to administrator command") {
		return slog.LevelInfo
	}
	for _, s := range []string{"PANIC:", "FATAL:", "ERROR:"} {
		if strings.Contains(line, s) {
			return slog.LevelError
		}
	}
	if strings.Contains(line, "WARNING:") {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}
