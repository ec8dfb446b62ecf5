package updatecheck

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/internal/periodic"
	"airgapcoder/internal/periodic/periodictest"
)

var fixedNow = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// releaseServer serves body with status on loopback and sends the path of
// every request on the returned channel.
func releaseServer(t *testing.T, status int, body string) (*url.URL, <-chan string) {
	t.Helper()
	ch := make(chan string, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			t.Errorf("got method %s, want GET", r.Method)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
		select {
		case ch <- r.URL.Path:
		default:
		}
	}))
	t.Cleanup(srv.Close)
	return periodictest.MustParseURL(t, srv.URL+"/coder/latest.json"), ch
}

func newChecker(t *testing.T, opts Options) *Checker {
	t.Helper()
	if opts.Client == nil {
		opts.Client = http.DefaultClient
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return fixedNow }
	}
	return periodictest.MustNew(t, New, opts)
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	mustParse := func(s string) *url.URL { return periodictest.MustParseURL(t, s) }
	good := func() Options {
		return Options{URL: mustParse("https://mirror.example.internal/latest.json"), Client: http.DefaultClient, CurrentVersion: "v1.2.3"}
	}
	periodictest.CheckNewRejects(t, "updatecheck: ", good, func(o Options) (any, error) { return New(o) },
		[]periodictest.BadOption[Options]{
			{Name: "nil URL", Edit: func(o *Options) { o.URL = nil }, Want: "URL is required"},
			{Name: "file scheme", Edit: func(o *Options) { o.URL = mustParse("file:///etc/latest.json") }, Want: "scheme"},
			{Name: "relative URL", Edit: func(o *Options) { o.URL = mustParse("latest.json") }, Want: "scheme"},
			{Name: "no host", Edit: func(o *Options) { o.URL = mustParse("https:///latest.json") }, Want: "missing host"},
			{Name: "nil client", Edit: func(o *Options) { o.Client = nil }, Want: "Client is required"},
			{Name: "empty current version", Edit: func(o *Options) { o.CurrentVersion = "" }, Want: "current version"},
			{Name: "bad current version", Edit: func(o *Options) { o.CurrentVersion = "dev" }, Want: "current version"},
			{Name: "negative interval", Edit: func(o *Options) { o.Interval = -time.Minute }, Want: "negative interval"},
		})
}

// TestNewSendsNothing: a Checker that exists but is not run sends nothing,
// and Run sends nothing once ctx is cancelled. (Off, the server does not
// construct one at all.)
func TestNewSendsNothing(t *testing.T) {
	t.Parallel()
	transport := &periodictest.CountingTransport{}
	u, _ := url.Parse("http://127.0.0.1:1/latest.json")
	c := newChecker(t, Options{URL: u, Client: &http.Client{Transport: transport}, CurrentVersion: "v1.2.3", Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Errorf("Run with a cancelled context: got %v, want nil", err)
	}
	if n := transport.Requests(); n != 0 {
		t.Errorf("got %d requests, want 0", n)
	}
	if res, ok := c.Latest(); ok {
		t.Errorf("Latest without a check: got %+v, true; want false", res)
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("http://127.0.0.1:1/latest.json")
	c, err := New(Options{URL: u, Client: http.DefaultClient, CurrentVersion: "v0.0.0-devel"})
	if err != nil {
		t.Fatal(err)
	}
	if c.opts.Interval != DefaultInterval {
		t.Errorf("got interval %s, want %s", c.opts.Interval, DefaultInterval)
	}
	if res, ok := c.Latest(); ok {
		t.Errorf("Latest before any check: got %+v, true; want false", res)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		current   string
		body      string
		want      Result
		wantError bool
	}{
		{
			name:    "newer release",
			current: "v1.2.3",
			body:    `{"version":"v1.3.0","url":"https://mirror.example.internal/coder/v1.3.0/"}`,
			want:    Result{Latest: "v1.3.0", URL: "https://mirror.example.internal/coder/v1.3.0/", UpdateAvailable: true},
		},
		{
			name:    "same release",
			current: "v1.3.0",
			body:    `{"version":"v1.3.0","url":"https://mirror.example.internal/coder/v1.3.0/"}`,
			want:    Result{Latest: "v1.3.0", URL: "https://mirror.example.internal/coder/v1.3.0/"},
		},
		{
			name:    "running newer than served",
			current: "v1.4.0-rc.1",
			body:    `{"version":"v1.3.0"}`,
			want:    Result{Latest: "v1.3.0"},
		},
		{
			name:    "development build",
			current: "v0.0.0-devel",
			body:    `{"version":"v0.1.0","url":"http://mirror/coder/"}`,
			want:    Result{Latest: "v0.1.0", URL: "http://mirror/coder/", UpdateAvailable: true},
		},
		{
			name:    "unknown fields are ignored",
			current: "v1.2.3",
			body:    "{\"version\":\"v1.2.4\",\"notes\":\"fixes\",\"size\":12}\n",
			want:    Result{Latest: "v1.2.4", UpdateAvailable: true},
		},
		{name: "bad JSON", current: "v1.2.3", body: `{"version":`, wantError: true},
		{name: "not an object", current: "v1.2.3", body: `["v1.3.0"]`, wantError: true},
		{name: "trailing data", current: "v1.2.3", body: `{"version":"v1.3.0"} {}`, wantError: true},
		{name: "empty body", current: "v1.2.3", body: ``, wantError: true},
		{name: "missing version", current: "v1.2.3", body: `{"url":"https://x/"}`, wantError: true},
		{name: "bad version", current: "v1.2.3", body: `{"version":"latest"}`, wantError: true},
		{name: "non-http release url", current: "v1.2.3", body: `{"version":"v1.3.0","url":"javascript:alert(1)"}`, wantError: true},
		{name: "oversized body", current: "v1.2.3", body: `{"version":"v1.3.0","pad":"` + strings.Repeat("x", periodic.MaxResponseBody) + `"}`, wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, _ := releaseServer(t, http.StatusOK, tt.body)
			c := newChecker(t, Options{URL: u, CurrentVersion: tt.current})
			got, err := c.Check(context.Background())
			if tt.wantError {
				if err == nil {
					t.Fatalf("Check: got %+v, want an error", got)
				}
				if !strings.Contains(err.Error(), u.String()) {
					t.Errorf("got error %q, want it to name %s", err, u)
				}
				if res, ok := c.Latest(); ok {
					t.Errorf("Latest after a failed check: got %+v, true; want false", res)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			tt.want.Checked = fixedNow
			tt.want.Current = tt.current
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if latest, ok := c.Latest(); !ok || latest != tt.want {
				t.Errorf("Latest: got %+v, %t; want %+v, true", latest, ok, tt.want)
			}
		})
	}
}

func TestCheckNon2xx(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusNotFound, http.StatusInternalServerError, http.StatusFound} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			u, _ := releaseServer(t, status, `{"version":"v9.9.9"}`)
			c := newChecker(t, Options{URL: u, CurrentVersion: "v1.2.3"})
			_, err := c.Check(context.Background())
			if err == nil {
				t.Fatal("Check returned nil, want an error")
			}
			for _, want := range []string{http.StatusText(status), u.String()} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("got error %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestLatestKeepsLastSuccess(t *testing.T) {
	t.Parallel()
	// The feed answers once and then fails with 502.
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) > 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_, _ = w.Write([]byte(`{"version":"v1.3.0"}`))
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL + "/coder/latest.json")
	if err != nil {
		t.Fatal(err)
	}
	c := newChecker(t, Options{URL: u, CurrentVersion: "v1.2.3"})
	want, err := c.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(context.Background()); err == nil {
		t.Fatal("Check against a 502: got nil, want an error")
	}
	if got, ok := c.Latest(); !ok || got != want {
		t.Errorf("Latest: got %+v, %t; want %+v, true", got, ok, want)
	}
}

func TestRunChecksImmediatelyAndRepeats(t *testing.T) {
	t.Parallel()
	periodictest.EachPace(t, func(t *testing.T, p periodictest.Pace) {
		u, requests := releaseServer(t, http.StatusOK, `{"version":"v1.3.0"}`)
		logs := periodictest.NewLogRecorder()
		c := newChecker(t, Options{
			URL:            u,
			CurrentVersion: "v1.2.3",
			Interval:       p.Interval,
			Logger:         slog.New(logs),
		})
		stop := periodictest.RunInBackground(t, c.Run)

		for i := range p.Rounds {
			if path := periodictest.Next(t, requests, fmt.Sprintf("check %d", i)); path != "/coder/latest.json" {
				t.Errorf("check %d: got path %q, want /coder/latest.json", i, path)
			}
		}
		if rec := logs.Next(t); rec.Message != "update available" {
			t.Errorf("got log %q, want %q", rec.Message, "update available")
		}

		stop()
		if res, ok := c.Latest(); !ok || !res.UpdateAvailable || res.Latest != "v1.3.0" {
			t.Errorf("Latest after Run: got %+v, %t; want v1.3.0 with an update available", res, ok)
		}
	})
}
