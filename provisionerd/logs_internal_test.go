package provisionerd

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/codersdk"
)

// TestJobLogsCloseOutlastsServerErrors: the last lines of a job are sent
// again while coderd answers 500 (its database restarting): the job's end
// is reported after them, so a single failed attempt must not lose them.
func TestJobLogsCloseOutlastsServerErrors(t *testing.T) {
	var mu sync.Mutex
	var got []string
	failures := 2
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(codersdk.Response{Message: "Internal error", Detail: "FATAL: terminating connection due to unexpected postmaster exit"})
			return
		}
		var req codersdk.UpdateJobRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, l := range req.Logs {
			got = append(got, l.Output)
		}
		_ = json.NewEncoder(w).Encode(codersdk.UpdateJobResponse{})
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	clock := quartz.NewMock(t)
	retry := clock.Trap().NewTimer("provisionerd", "retryBackoff")
	defer retry.Close()
	d := &Daemon{id: "daemon-1", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		opts: Options{Client: codersdk.New(u), Clock: clock, HeartbeatInterval: 5 * time.Second}}

	logs := newJobLogs(d, "job-1", func(reason string) { t.Errorf("canceled: %s", reason) })
	want := []string{"line 1", "line 2", "line 3"}
	for _, line := range want {
		logs.Info(line)
	}
	// The clock stays before the first flush: the lines go in Close's
	// sends, the first two answered 500, each followed by a backoff wait
	// that passes only when the clock is moved on by it.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	closed := make(chan struct{})
	go func() { defer close(closed); logs.Close() }()
	for range 2 {
		call := retry.MustWait(ctx)
		call.MustRelease(ctx)
		clock.Advance(call.Duration).MustWait(ctx)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not return after the second wait")
	}

	mu.Lock()
	defer mu.Unlock()
	if failures != 0 {
		t.Fatalf("%d of the planted 500s were not met: Close sent fewer than 3 times", failures)
	}
	if len(got) != len(want) {
		t.Fatalf("coderd received %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("coderd received %q, want %q", got, want)
		}
	}
}
