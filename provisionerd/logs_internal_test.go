package provisionerd

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

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
	d := &Daemon{id: "daemon-1", log: slog.New(slog.NewTextHandler(io.Discard, nil)), opts: Options{Client: codersdk.New(u)}}

	logs := newJobLogs(d, "job-1", func(reason string) { t.Errorf("canceled: %s", reason) })
	want := []string{"line 1", "line 2", "line 3"}
	for _, line := range want {
		logs.Info(line)
	}
	logs.Close() // before the first tick: the lines go in Close's sends

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
