package logformat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"airgapcoder/internal/logformat"
	"airgapcoder/internal/syncbuf"
)

func TestTextHandler(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 16, 0, 0, 123e6, time.Local)
	tests := []struct {
		name string
		log  func(l *slog.Logger)
		want string
	}{
		{"plain", func(l *slog.Logger) { l.Info("server ready") }, "2026-11-23 16:00:00.123 INFO  server ready\n"},
		{"component and attrs", func(l *slog.Logger) {
			l.With("component", "coderd").Warn("login rate limit reached", "ip", "10.0.0.7", "account", "admin@example.com", "retry_after", 42*time.Second)
		}, "2026-11-23 16:00:00.123 WARN  coderd: login rate limit reached ip=10.0.0.7 account=admin@example.com retry_after=42s\n"},
		{"nested components", func(l *slog.Logger) {
			l.With("component", "coderd", "release", "2026.11.1").With("component", "api").Error("internal error", "err", errors.New("dial tcp: refused"))
		}, `2026-11-23 16:00:00.123 ERROR coderd.api: internal error release=2026.11.1 err="dial tcp: refused"` + "\n"},
		{"quoting", func(l *slog.Logger) {
			l.Info("values", "empty", "", "eq", "a=b", "quote", `say "hi"`, "newline", "a\nb", "n", 3, "ok", true, "f", 1.5)
		}, `2026-11-23 16:00:00.123 INFO  values empty="" eq="a=b" quote="say \"hi\"" newline="a\nb" n=3 ok=true f=1.5` + "\n"},
		{"groups", func(l *slog.Logger) {
			l.WithGroup("req").With("component", "not-a-component").Info("served", slog.Group("resp", "status", 200), "path", "/healthz")
		}, "2026-11-23 16:00:00.123 INFO  served req.component=not-a-component req.resp.status=200 req.path=/healthz\n"},
		{"component on the record", func(l *slog.Logger) { l.Info("started", "component", "mirror", "url", "https://127.0.0.1:8443") },
			"2026-11-23 16:00:00.123 INFO  mirror: started url=https://127.0.0.1:8443\n"},
		{"below the level", func(l *slog.Logger) { l.Debug("noise") }, ""},
		{"any value", func(l *slog.Logger) { l.Info("listening", "urls", []string{"http://a", "http://b"}) },
			`2026-11-23 16:00:00.123 INFO  listening urls="[http://a http://b]"` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			tt.log(slog.New(fixedTime{logformat.NewTextHandler(&buf, nil), at}))
			if got := buf.String(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// fixedTime stamps every record with one time.
type fixedTime struct {
	slog.Handler
	at time.Time
}

func (f fixedTime) Handle(ctx context.Context, r slog.Record) error {
	r.Time = f.at
	return f.Handler.Handle(ctx, r)
}
func (f fixedTime) WithAttrs(as []slog.Attr) slog.Handler {
	return fixedTime{f.Handler.WithAttrs(as), f.at}
}
func (f fixedTime) WithGroup(n string) slog.Handler { return fixedTime{f.Handler.WithGroup(n), f.at} }

func TestNewHandlerPicksFormat(t *testing.T) {
	t.Parallel()
	textLine := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} INFO  hello k=v\n$`)
	tests := []struct {
		format logformat.Format
		tty    bool
		json   bool
	}{
		{logformat.Auto, false, true},
		{logformat.Auto, true, false},
		{logformat.Text, false, false},
		{logformat.JSON, true, true},
		{"", false, true},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		slog.New(logformat.NewHandler(&buf, tt.format, tt.tty, nil)).Info("hello", "k", "v")
		var obj map[string]any
		isJSON := json.Unmarshal(buf.Bytes(), &obj) == nil && obj["msg"] == "hello"
		if isJSON != tt.json {
			t.Errorf("format %q tty=%v: got %q, want JSON=%v", tt.format, tt.tty, buf.String(), tt.json)
		}
		if !tt.json && !textLine.MatchString(buf.String()) {
			t.Errorf("format %q tty=%v: got %q, want a text line", tt.format, tt.tty, buf.String())
		}
	}
}

func TestFormatFlagValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]logformat.Format{"": logformat.Auto, "auto": logformat.Auto, "text": logformat.Text, "JSON": logformat.JSON, " json ": logformat.JSON} {
		var f logformat.Format
		if err := f.Set(in); err != nil || f != want {
			t.Errorf("Set(%q): got %q, %v; want %q", in, f, err, want)
		}
	}
	var f logformat.Format
	if err := f.Set("xml"); err == nil || !strings.Contains(err.Error(), "text, json or auto") {
		t.Errorf("Set(xml): got %v, want an error naming the formats", err)
	}
	if got := (logformat.Format("")).String(); got != "auto" {
		t.Errorf("zero Format: got %q, want auto", got)
	}
}

func TestTextHandlerConcurrentLines(t *testing.T) {
	t.Parallel()
	var buf syncbuf.Buffer
	l := slog.New(logformat.NewTextHandler(&buf, nil)).With("component", "x")
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); l.Info("line", "i", i) }()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 50 {
		t.Fatalf("got %d lines, want 50", len(lines))
	}
	for _, line := range lines {
		if !strings.Contains(line, " INFO  x: line i=") {
			t.Errorf("torn line %q", line)
		}
	}
}

// TestTextHandlerOptions: UTC writes the record's time as one UTC field and
// time values in UTC; ReplaceAttr sees each attribute with its groups
// (the logger's when they are added, the record's when it is written),
// rewrites or drops it, and is not called for groups themselves.
func TestTextHandlerOptions(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 17, 0, 0, 123e6, time.FixedZone("CET", 3600))
	var seen []string
	opts := &logformat.TextOptions{UTC: true, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		seen = append(seen, strings.Join(append(slices.Clone(groups), a.Key), "."))
		switch a.Key {
		case "drop":
			return slog.Attr{}
		case "secret":
			return slog.String(a.Key, "[redacted]")
		}
		return a
	}}
	var buf bytes.Buffer
	l := slog.New(fixedTime{logformat.NewTextHandler(&buf, opts), at})
	l.With("component", "coderd", "secret", "s1").WithGroup("req").
		Info("served", "drop", 1, "at", at, slog.Group("resp", "status", 200, "secret", "s2"))
	want := `2026-11-23T16:00:00.123Z INFO  coderd: served secret=[redacted] req.at=2026-11-23T16:00:00.123Z req.resp.status=200 req.resp.secret=[redacted]` + "\n"
	if got := buf.String(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	wantSeen := []string{"component", "secret", "req.drop", "req.at", "req.resp.status", "req.resp.secret"}
	if !slices.Equal(seen, wantSeen) {
		t.Errorf("ReplaceAttr saw %q, want %q", seen, wantSeen)
	}
}
