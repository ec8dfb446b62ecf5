// Package periodictest holds the test doubles shared by the tests of
// internal/periodic and of the features built on it (coderd/telemetry,
// coderd/updatecheck): a transport that counts the requests that reach it,
// a slog handler that hands log records to the test, a Run loop started in
// the background and stopped with a check of what it returned, the two
// paces a Run test covers, a bounded receive from a channel, a New that
// must succeed, and the table test of the options a New refuses.
//
// It is for tests only and must not be imported by product code.
package periodictest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/internal/testrun"
)

// WaitTimeout bounds every wait in this package but RunInBackground's
// (testrun.StopTimeout). It only guards against a hung test; no assertion
// depends on it.
const WaitTimeout = 10 * time.Second

// CountingTransport is an http.RoundTripper that counts the requests that
// reach it and answers none: a client built on it shows whether anything
// was sent at all. The zero value is ready to use.
type CountingTransport struct{ n atomic.Int32 }

// RoundTrip counts req and fails.
func (c *CountingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	c.n.Add(1)
	return nil, errors.New("CountingTransport sends nothing")
}

// Requests reports how many requests have reached c.
func (c *CountingTransport) Requests() int32 { return c.n.Load() }

// LogRecorder is a slog.Handler that hands every record to the test; the
// records that find no room in its buffer of 64 are dropped. Make one with
// NewLogRecorder.
type LogRecorder struct {
	ch chan slog.Record
}

// NewLogRecorder returns an empty LogRecorder.
func NewLogRecorder() *LogRecorder { return &LogRecorder{ch: make(chan slog.Record, 64)} }

// Next returns the oldest record not yet returned, failing the test when
// none comes within WaitTimeout.
func (h *LogRecorder) Next(t testing.TB) slog.Record {
	t.Helper()
	return Next(t, h.ch, "a log record")
}

// Enabled reports true for every level.
func (h *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs returns h: attributes given to a derived logger are not kept.
func (h *LogRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup returns h: groups are not kept.
func (h *LogRecorder) WithGroup(string) slog.Handler { return h }

// Handle keeps a copy of r.
func (h *LogRecorder) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Clone():
	default:
	}
	return nil
}

// Next receives from ch, failing the test with what it waited for when
// nothing comes within WaitTimeout. Like t.Fatal, it must be called from
// the goroutine running the test.
func Next[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(WaitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// RunInBackground calls run in a goroutine with a context of its own and
// returns stop, which cancels that context and checks that run returned
// nil within testrun.StopTimeout (the components' Run contract:
// cancellation is a normal exit); it is testrun.Background. stop runs
// again at cleanup; calls after the first do nothing.
func RunInBackground(t testing.TB, run func(context.Context) error) (stop func()) {
	t.Helper()
	return testrun.Background(t, "periodic", run)
}

// Pace is how fast a test runs a Run loop, and how many rounds it waits for.
type Pace struct {
	Interval time.Duration
	Rounds   int
}

// EachPace runs test as a parallel subtest at each of the two paces a Run
// test covers: "immediately", whose interval lies far beyond the test's
// lifetime, so the one round seen can only be the immediate one; and
// "repeats", whose interval is short enough for three rounds to come at
// once.
func EachPace(t *testing.T, test func(t *testing.T, p Pace)) {
	t.Helper()
	paces := []struct {
		name string
		Pace
	}{
		{"immediately", Pace{Interval: time.Hour, Rounds: 1}},
		{"repeats", Pace{Interval: 5 * time.Millisecond, Rounds: 3}},
	}
	for _, p := range paces {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			test(t, p.Pace)
		})
	}
}

// MustNew calls newFn with opts, failing the test when it returns an error.
func MustNew[O, T any](t testing.TB, newFn func(O) (T, error), opts O) T {
	t.Helper()
	v, err := newFn(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

// MustParseURL parses s, failing the test when it is not a URL.
func MustParseURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("parse URL %q: %v", s, err)
	}
	return u
}

// BadOption is one way to spoil the options of a feature built on periodic,
// and what the error of its New must then say.
type BadOption[O any] struct {
	Name string
	Edit func(*O)
	Want string
}

// CheckNewRejects runs each case as a parallel subtest: good options edited
// by the case must make newFn fail with an error that starts with prefix
// (the package's, as "telemetry: ") and contains the case's Want.
func CheckNewRejects[O any](t *testing.T, prefix string, good func() O, newFn func(O) (any, error), cases []BadOption[O]) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			opts := good()
			tt.Edit(&opts)
			v, err := newFn(opts)
			if err == nil {
				t.Fatalf("New returned %v, want an error containing %q", v, tt.Want)
			}
			if !strings.Contains(err.Error(), tt.Want) || !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("got error %q, want it to start with %q and contain %q", err, prefix, tt.Want)
			}
		})
	}
}
