package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"airgapcoder/internal/periodic/periodictest"
)

var fixedNow = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

func collectCounts(ctx context.Context) (Snapshot, error) {
	return Snapshot{Users: 3, Templates: 2, Workspaces: 5}, nil
}

// received is what snapshotServer saw in one request.
type received struct {
	method, path, contentType, userAgent string
	snap                                 Snapshot
	decodeErr                            error
}

// snapshotServer serves the telemetry endpoint on loopback. Each request is
// answered with the next status from statuses (200 once they run out) and
// then sent on the returned channel.
func snapshotServer(t *testing.T, statuses ...int) (*url.URL, <-chan received) {
	t.Helper()
	ch := make(chan received, 16)
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := received{method: r.Method, path: r.URL.Path, contentType: r.Header.Get("Content-Type"), userAgent: r.Header.Get("User-Agent")}
		got.decodeErr = json.NewDecoder(r.Body).Decode(&got.snap)
		mu.Lock()
		status := http.StatusOK
		if len(statuses) > 0 {
			status, statuses = statuses[0], statuses[1:]
		}
		mu.Unlock()
		w.WriteHeader(status)
		select {
		case ch <- got:
		default:
			t.Errorf("too many unread requests")
		}
	}))
	t.Cleanup(srv.Close)
	return periodictest.MustParseURL(t, srv.URL), ch
}

func newReporter(t *testing.T, opts Options) *Reporter {
	t.Helper()
	if opts.Collect == nil {
		opts.Collect = collectCounts
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return fixedNow }
	}
	return periodictest.MustNew(t, New, opts)
}

func next(t *testing.T, ch <-chan received) received {
	t.Helper()
	return periodictest.Next(t, ch, "a snapshot")
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	good, _ := url.Parse("https://telemetry.example.com")
	mustParse := func(s string) *url.URL { return periodictest.MustParseURL(t, s) }
	periodictest.CheckNewRejects(t, "telemetry: ",
		func() Options { return Options{URL: good, Client: http.DefaultClient, Collect: collectCounts} },
		func(o Options) (any, error) { return New(o) },
		[]periodictest.BadOption[Options]{
			{Name: "nil URL", Edit: func(o *Options) { o.URL = nil }, Want: "URL is required"},
			{Name: "ftp scheme", Edit: func(o *Options) { o.URL = mustParse("ftp://telemetry.example.com") }, Want: "scheme"},
			{Name: "relative URL", Edit: func(o *Options) { o.URL = mustParse("/snapshot") }, Want: "scheme"},
			{Name: "no host", Edit: func(o *Options) { o.URL = mustParse("https:///x") }, Want: "missing host"},
			{Name: "nil client", Edit: func(o *Options) { o.Client = nil }, Want: "Client is required"},
			{Name: "nil collect", Edit: func(o *Options) { o.Collect = nil }, Want: "Collect is required"},
			{Name: "negative interval", Edit: func(o *Options) { o.Interval = -time.Second }, Want: "negative interval"},
		})
}

// TestNewSendsNothing: a Reporter that exists but is not run sends nothing,
// and Run sends nothing once ctx is cancelled. (Off, the server does not
// construct one at all.)
func TestNewSendsNothing(t *testing.T) {
	t.Parallel()
	transport := &periodictest.CountingTransport{}
	u, _ := url.Parse("http://127.0.0.1:1")
	r := newReporter(t, Options{URL: u, Client: &http.Client{Transport: transport}, Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run with a cancelled context: got %v, want nil", err)
	}
	if n := transport.Requests(); n != 0 {
		t.Errorf("got %d requests, want 0", n)
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("http://127.0.0.1:1")
	r, err := New(Options{URL: u, Client: http.DefaultClient, Collect: collectCounts})
	if err != nil {
		t.Fatal(err)
	}
	if r.opts.Interval != DefaultInterval {
		t.Errorf("got interval %s, want %s", r.opts.Interval, DefaultInterval)
	}
}

func TestReportPostsSnapshot(t *testing.T) {
	t.Parallel()
	u, ch := snapshotServer(t)
	r := newReporter(t, Options{
		URL:          u.JoinPath("base"),
		Client:       http.DefaultClient,
		DeploymentID: "dep-123",
		Version:      "v1.2.3",
		Collect: func(ctx context.Context) (Snapshot, error) {
			// Identity fields set here must be overwritten by the Reporter.
			return Snapshot{DeploymentID: "wrong", OS: "wrong", Users: 3, Templates: 2, Workspaces: 5}, nil
		},
	})
	if err := r.Report(context.Background()); err != nil {
		t.Fatalf("Report: %v", err)
	}
	got := next(t, ch)
	if got.method != http.MethodPost {
		t.Errorf("got method %s, want POST", got.method)
	}
	if got.path != "/base/snapshot" {
		t.Errorf("got path %q, want %q", got.path, "/base/snapshot")
	}
	if got.contentType != "application/json" {
		t.Errorf("got Content-Type %q, want application/json", got.contentType)
	}
	if got.userAgent != "coder/v1.2.3" {
		t.Errorf("got User-Agent %q, want coder/v1.2.3", got.userAgent)
	}
	if got.decodeErr != nil {
		t.Fatalf("decode body: %v", got.decodeErr)
	}
	want := Snapshot{
		DeploymentID: "dep-123",
		Version:      "v1.2.3",
		Time:         fixedNow,
		Users:        3,
		Templates:    2,
		Workspaces:   5,
		OS:           runtime.GOOS,
		Arch:         runtime.GOARCH,
	}
	if !got.snap.Time.Equal(want.Time) {
		t.Errorf("got time %s, want %s", got.snap.Time, want.Time)
	}
	got.snap.Time = want.Time
	if got.snap != want {
		t.Errorf("got snapshot %+v, want %+v", got.snap, want)
	}
}

func TestReportErrors(t *testing.T) {
	t.Parallel()

	t.Run("non-2xx", func(t *testing.T) {
		t.Parallel()
		u, ch := snapshotServer(t, http.StatusInternalServerError)
		r := newReporter(t, Options{URL: u, Client: http.DefaultClient})
		err := r.Report(context.Background())
		if err == nil {
			t.Fatal("Report returned nil, want an error")
		}
		next(t, ch)
		for _, want := range []string{"500", u.JoinPath("snapshot").String()} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("got error %q, want it to contain %q", err, want)
			}
		}
	})

	t.Run("collect fails", func(t *testing.T) {
		t.Parallel()
		u, ch := snapshotServer(t)
		boom := errors.New("database down")
		r := newReporter(t, Options{
			URL:     u,
			Client:  http.DefaultClient,
			Collect: func(context.Context) (Snapshot, error) { return Snapshot{}, boom },
		})
		if err := r.Report(context.Background()); !errors.Is(err, boom) {
			t.Errorf("got error %v, want %v", err, boom)
		}
		select {
		case got := <-ch:
			t.Errorf("got a request %+v, want none", got)
		default:
		}
	})
}

func TestRunSendsImmediatelyAndRepeats(t *testing.T) {
	t.Parallel()
	periodictest.EachPace(t, func(t *testing.T, p periodictest.Pace) {
		u, ch := snapshotServer(t)
		r := newReporter(t, Options{URL: u, Client: http.DefaultClient, Interval: p.Interval})
		stop := periodictest.RunInBackground(t, r.Run)
		for i := range p.Rounds {
			if got := next(t, ch); got.snap.Users != 3 || got.snap.Workspaces != 5 {
				t.Errorf("snapshot %d: got users %d and workspaces %d, want 3 and 5", i, got.snap.Users, got.snap.Workspaces)
			}
		}
		stop()
	})
}
