package logring_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"airgapcoder/internal/logring"
)

// TestRingKeepsNewest: a ring of n keeps the newest n lines in order and
// counts what it dropped.
func TestRingKeepsNewest(t *testing.T) {
	for _, tc := range []struct {
		size, add   int
		first, last string
		dropped     uint64
	}{
		{size: 3, add: 0},
		{size: 3, add: 2, first: "line 0", last: "line 1"},
		{size: 3, add: 3, first: "line 0", last: "line 2"},
		{size: 3, add: 10, first: "line 7", last: "line 9", dropped: 7},
	} {
		t.Run(fmt.Sprintf("%d-of-%d", tc.add, tc.size), func(t *testing.T) {
			r := logring.New(tc.size)
			for i := range tc.add {
				r.Add(fmt.Sprintf("line %d", i))
			}
			lines, dropped := r.Lines()
			if want := min(tc.add, tc.size); len(lines) != want {
				t.Fatalf("got %d lines %q, want %d", len(lines), lines, want)
			}
			if dropped != tc.dropped {
				t.Errorf("got %d dropped, want %d", dropped, tc.dropped)
			}
			if len(lines) > 0 && (lines[0] != tc.first || lines[len(lines)-1] != tc.last) {
				t.Errorf("got %q, want %q first and %q last", lines, tc.first, tc.last)
			}
		})
	}
	r := logring.New(1)
	r.Add(strings.Repeat("é", logring.MaxLine))
	if lines, _ := r.Lines(); len(lines[0]) > logring.MaxLine+len("…") || !strings.HasSuffix(lines[0], "é…") {
		t.Errorf("a long line: got %d bytes ending %q, want at most %d ending in a whole é and …", len(lines[0]), lines[0][len(lines[0])-8:], logring.MaxLine)
	}
}

// TestHandlerRedacts: the ring's copy of a record holds no secret, whether
// it came as an attribute named like one, inside a URL, as name=value in
// a message or an error, in a group, or on the logger; the wrapped handler
// still gets the record as it was.
func TestHandlerRedacts(t *testing.T) {
	const (
		psk      = "planted-psk-4f1d2c"
		password = "planted-db-pass-9e8d"
		token    = "AbCdEfGhIj-abcdefghijklmnopqrstuv"
		cookie   = "planted-cookie-77aa"
		bearer   = "planted-bearer-31cc0d"
		agent    = "planted-agent-token-5b5b"
	)
	var out bytes.Buffer
	ring := logring.New(100)
	log := slog.New(logring.NewHandler(slog.NewTextHandler(&out, nil), ring, nil))
	api := log.With("component", "coderd").With("component", "api", "psk", psk)
	api.Info("provisioner daemon registered", "name", "pd-1")
	api.Warn("connect to postgres", "url", "postgres://coder:"+password+"@db.internal:5432/coder?sslmode=verify-full")
	api.Error("agent request failed", "err", errors.New("GET /api/v2/x?token="+agent+": 401"), "header", "Authorization: Bearer "+bearer)
	log.Info("login", "session_token", token, "Cookie", cookie, slog.Group("db", "password", password, "host", "db.internal"))
	log.Info("a token in free text: " + token)
	log.Info("conninfo", "dsn", "host=db.internal user=coder password="+password+" dbname=coder")
	log.Info("request", "body", `{"user":"admin","password":"`+password+`"}`)
	log.Debug("not kept at info", "x", 1)

	lines, _ := ring.Lines()
	all := strings.Join(lines, "\n")
	for name, secret := range map[string]string{"psk": psk, "password": password, "session token": token, "cookie": cookie, "bearer": bearer, "agent token": agent} {
		if strings.Contains(all, secret) {
			t.Errorf("the ring holds the %s:\n%s", name, all)
		}
	}
	if len(lines) != 7 {
		t.Fatalf("got %d lines, want 7 (debug not kept):\n%s", len(lines), all)
	}
	for i, want := range []string{
		"INFO  coderd.api: provisioner daemon registered psk=[redacted] name=pd-1",
		"WARN  coderd.api: connect to postgres psk=[redacted] url=\"postgres://coder:[redacted]@db.internal:5432/coder?sslmode=verify-full\"",
		`ERROR coderd.api: agent request failed psk=[redacted] err="GET /api/v2/x?token=[redacted] 401" header="Authorization: [redacted] [redacted]"`,
		`INFO  login session_token=[redacted] Cookie=[redacted] db.password=[redacted] db.host=db.internal`,
		`INFO  a token in free text: [redacted]`,
		`INFO  conninfo dsn="host=db.internal user=coder password=[redacted] dbname=coder"`,
		// Redacted before it is quoted: in the line, the JSON's quotes are escaped.
		`INFO  request body="{\"user\":\"admin\",\"password\":\"[redacted]\"}"`,
	} {
		if _, rest, _ := strings.Cut(lines[i], " "); rest != want {
			t.Errorf("line %d: got %q, want %q", i, rest, want)
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000Z", strings.Fields(lines[i])[0]); err != nil {
			t.Errorf("line %d: got time %q, want UTC to the millisecond: %v", i, strings.Fields(lines[i])[0], err)
		}
	}
	// The wrapped handler saw the records as logged (its own business).
	if !strings.Contains(out.String(), "psk="+psk) || strings.Contains(out.String(), "not kept at info") {
		t.Errorf("the wrapped handler got:\n%s", out.String())
	}
}

// TestHandlerLevels: the ring keeps records from its level whatever the
// wrapped handler's, and the wrapped handler gets only what it is enabled
// for.
func TestHandlerLevels(t *testing.T) {
	var out bytes.Buffer
	ring := logring.New(10)
	log := slog.New(logring.NewHandler(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}), ring, slog.LevelDebug))
	log.Debug("debug")
	log.Warn("warn")
	if lines, _ := ring.Lines(); len(lines) != 2 {
		t.Errorf("ring: got %q, want the debug and the warn record", lines)
	}
	if strings.Contains(out.String(), "debug") || !strings.Contains(out.String(), "warn") {
		t.Errorf("wrapped handler: got %q, want only the warn record", out.String())
	}
}

// TestHandlerConcurrent: loggers sharing a ring from many goroutines lose
// no line (run with -race).
func TestHandlerConcurrent(t *testing.T) {
	ring := logring.New(1000)
	log := slog.New(logring.NewHandler(slog.DiscardHandler, ring, nil))
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := log.With("component", fmt.Sprint("g", g))
			for i := range 50 {
				l.Info("line", "i", i)
			}
		}()
	}
	wg.Wait()
	if lines, _ := ring.Lines(); len(lines) != 500 {
		t.Errorf("got %d lines, want 500", len(lines))
	}
}
