package periodic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/internal/periodic/periodictest"
)

// request is what a test server saw.
type request struct {
	method, path, contentType, accept, userAgent string
	body                                         string
}

// endpoint serves status and body on loopback and sends every request it
// gets on the returned channel.
func endpoint(t *testing.T, status int, body string) (*url.URL, <-chan request) {
	t.Helper()
	ch := make(chan request, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
		select {
		case ch <- request{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Accept"), r.Header.Get("User-Agent"), string(b)}:
		default: // the test stopped reading
		}
	}))
	t.Cleanup(srv.Close)
	return periodictest.MustParseURL(t, srv.URL+"/feed"), ch
}

func newClient(t *testing.T, opts Options) *Client {
	t.Helper()
	if opts.Client == nil {
		opts.Client = http.DefaultClient
	}
	if opts.Interval == 0 {
		opts.Interval = time.Hour
	}
	return periodictest.MustNew(t, New, opts)
}

func next(t *testing.T, ch <-chan request) request {
	t.Helper()
	return periodictest.Next(t, ch, "a request")
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	mustParse := func(s string) *url.URL { return periodictest.MustParseURL(t, s) }
	tests := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"nil URL", func(o *Options) { o.URL = nil }, "URL is required"},
		{"file scheme", func(o *Options) { o.URL = mustParse("file:///etc/latest.json") }, `URL "file:///etc/latest.json": scheme must be http or https`},
		{"relative URL", func(o *Options) { o.URL = mustParse("latest.json") }, "scheme must be http or https"},
		{"no host", func(o *Options) { o.URL = mustParse("https:///latest.json") }, "missing host"},
		{"password redacted", func(o *Options) { o.URL = mustParse("ftp://user:secret@host/") }, `"ftp://user:xxxxx@host/"`},
		{"nil client", func(o *Options) { o.Client = nil }, "Client is required"},
		{"zero interval", func(o *Options) { o.Interval = 0 }, "Interval is required"},
		{"negative interval", func(o *Options) { o.Interval = -time.Minute }, "negative interval -1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := Options{URL: mustParse("https://mirror.example.internal/feed"), Client: http.DefaultClient, Interval: time.Hour}
			tt.edit(&opts)
			c, err := New(opts)
			if err == nil {
				t.Fatalf("New returned %v, want an error containing %q", c, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %q, want it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("got error %q, want the password redacted", err)
			}
		})
	}
}

// TestSendsOnlyInDo: constructing a Client and running rounds that do not
// call Do send nothing; a feature that is off never gets further than that.
func TestSendsOnlyInDo(t *testing.T) {
	t.Parallel()
	transport := &periodictest.CountingTransport{}
	u, _ := url.Parse("http://127.0.0.1:1/feed")
	c := newClient(t, Options{URL: u, Client: &http.Client{Transport: transport}, Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var rounds atomic.Int32
	err := c.Run(ctx, func(context.Context) error {
		if rounds.Add(1) == 3 {
			cancel()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Run: got %v, want nil", err)
	}
	if n := transport.Requests(); n != 0 {
		t.Fatalf("got %d requests without a call to Do, want 0", n)
	}
	if err := c.Do(context.Background(), http.MethodGet, nil, nil); err == nil {
		t.Fatal("Do through CountingTransport: got nil, want its error")
	}
	if n := transport.Requests(); n != 1 {
		t.Fatalf("got %d requests after one Do, want 1", n)
	}
}

func TestDoPost(t *testing.T) {
	t.Parallel()
	u, requests := endpoint(t, http.StatusNoContent, "")
	c := newClient(t, Options{URL: u, UserAgent: "coder/v1.2.3"})
	if err := c.Do(context.Background(), http.MethodPost, []byte(`{"users":3}`), nil); err != nil {
		t.Fatalf("Do: %v", err)
	}
	got := next(t, requests)
	want := request{method: http.MethodPost, path: "/feed", contentType: "application/json", userAgent: "coder/v1.2.3", body: `{"users":3}`}
	if got != want {
		t.Errorf("got request %+v, want %+v", got, want)
	}
}

func TestDoGetDecodes(t *testing.T) {
	t.Parallel()
	u, requests := endpoint(t, http.StatusOK, `{"version":"v1.3.0"}`)
	c := newClient(t, Options{URL: u})
	var doc struct{ Version string }
	decode := func(r io.Reader) error { return json.NewDecoder(r).Decode(&doc) }
	if err := c.Do(context.Background(), http.MethodGet, nil, decode); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if doc.Version != "v1.3.0" {
		t.Errorf("got version %q, want v1.3.0", doc.Version)
	}
	got := next(t, requests)
	if got.method != http.MethodGet || got.accept != "application/json" || got.contentType != "" || got.body != "" {
		t.Errorf("got request %+v, want a GET with no body that accepts application/json", got)
	}
	if strings.HasPrefix(got.userAgent, "coder/") {
		t.Errorf("got User-Agent %q with Options.UserAgent empty, want net/http's default", got.userAgent)
	}
}

func TestDoErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		status  int
		body    string
		decode  func(io.Reader) error
		want    []string
		decoded bool // whether decode must have run
	}{
		{name: "not found", status: http.StatusNotFound, body: `{"version":"v9"}`, want: []string{"GET", "unexpected status 404 Not Found"}},
		{name: "server error", status: http.StatusInternalServerError, want: []string{"GET", "unexpected status 500 Internal Server Error"}},
		{name: "not modified is not a success", status: http.StatusNotModified, want: []string{"unexpected status 304"}},
		{
			name: "decode fails", status: http.StatusOK, body: `{`,
			decode:  func(r io.Reader) error { return json.NewDecoder(r).Decode(new(map[string]any)) },
			want:    []string{"decode response from", "unexpected EOF"},
			decoded: true,
		},
		{
			name: "body cut at MaxResponseBody", status: http.StatusOK, body: strings.Repeat("x", MaxResponseBody+10),
			decode: func(r io.Reader) error {
				b, err := io.ReadAll(r)
				if err != nil {
					return err
				}
				if len(b) != MaxResponseBody {
					return fmt.Errorf("decode saw %d bytes, want %d", len(b), MaxResponseBody)
				}
				return errors.New("cut")
			},
			want:    []string{"decode response from", ": cut"},
			decoded: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, _ := endpoint(t, tt.status, tt.body)
			c := newClient(t, Options{URL: u})
			decoded := false
			decode := func(r io.Reader) error {
				decoded = true
				if tt.decode != nil {
					return tt.decode(r)
				}
				return nil
			}
			err := c.Do(context.Background(), http.MethodGet, nil, decode)
			if err == nil {
				t.Fatal("Do returned nil, want an error")
			}
			for _, want := range append(tt.want, u.String()) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("got error %q, want it to contain %q", err, want)
				}
			}
			if decoded != tt.decoded {
				t.Errorf("decode called: got %t, want %t", decoded, tt.decoded)
			}
		})
	}
}

func TestDoTimesOut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	u, _ := url.Parse(srv.URL)
	c := newClient(t, Options{URL: u})
	c.timeout = 50 * time.Millisecond
	err := c.Do(context.Background(), http.MethodGet, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do against a server that never answers: got %v, want %v", err, context.DeadlineExceeded)
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	periodictest.EachPace(t, func(t *testing.T, p periodictest.Pace) {
		u, requests := endpoint(t, http.StatusOK, "")
		c := newClient(t, Options{URL: u, Interval: p.Interval})
		stop := periodictest.RunInBackground(t, func(ctx context.Context) error {
			return c.Run(ctx, func(ctx context.Context) error {
				return c.Do(ctx, http.MethodPost, []byte(`{}`), nil)
			})
		})
		for range p.Rounds {
			next(t, requests)
		}
		stop()
	})
}

func TestRunCancelledCallsNothing(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("http://127.0.0.1:1/feed")
	c := newClient(t, Options{URL: u})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.Run(ctx, func(context.Context) error {
		t.Error("round called with a cancelled context")
		return nil
	})
	if err != nil {
		t.Errorf("Run returned %v, want nil", err)
	}
}

func TestRunLogsFailureAndKeepsGoing(t *testing.T) {
	t.Parallel()
	u, requests := endpoint(t, http.StatusInternalServerError, "")
	logs := periodictest.NewLogRecorder()
	c := newClient(t, Options{
		URL:      u,
		Interval: 5 * time.Millisecond,
		Action:   "send a test round",
		Logger:   slog.New(logs),
	})
	stop := periodictest.RunInBackground(t, func(ctx context.Context) error {
		return c.Run(ctx, func(ctx context.Context) error {
			return c.Do(ctx, http.MethodGet, nil, nil)
		})
	})

	rec := logs.Next(t)
	if rec.Level != slog.LevelWarn || rec.Message != "send a test round" {
		t.Errorf("got log %s %q, want %s %q", rec.Level, rec.Message, slog.LevelWarn, "send a test round")
	}
	attrs := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	if attrs["url"] != u.String() || !strings.Contains(attrs["error"], "500") {
		t.Errorf("got log attributes %v, want url %s and an error naming status 500", attrs, u)
	}
	for range 2 { // Run went on after the failures
		next(t, requests)
	}
	stop()
}
