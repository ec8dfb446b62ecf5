package testserver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"airgapcoder/internal/testserver"
)

// TestJSONAPICall: a call sends its body as JSON with the API's header,
// the call's edits applied after it, decodes a 2xx answer, and turns any
// other status into an error naming the call, the status and the answer.
func TestJSONAPICall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			http.Error(w, "no such thing", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write([]byte(`{"auth":"` + r.Header.Get("Authorization") + `","type":"` + r.Header.Get("Content-Type") + `","body":` + strings.TrimSpace(string(b)) + `}`))
	}))
	t.Cleanup(srv.Close)
	api := testserver.JSONAPI{
		Client:  &http.Client{Transport: &http.Transport{}},
		BaseURL: srv.URL,
		Header:  func(r *http.Request) { r.Header.Set("Authorization", "token admin") },
	}
	t.Cleanup(api.Client.CloseIdleConnections)
	ctx := context.Background()

	var got struct {
		Auth, Type string
		Body       map[string]int
	}
	if err := api.Call(ctx, http.MethodPost, "/echo", map[string]int{"n": 1}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Auth != "token admin" || got.Type != "application/json" || got.Body["n"] != 1 {
		t.Errorf("the server got %+v, want the admin token and {\"n\":1} as JSON", got)
	}
	if err := api.Call(ctx, http.MethodPost, "/echo", map[string]int{}, &got, func(r *http.Request) { r.SetBasicAuth("alice", "pw") }); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.Auth, "Basic ") {
		t.Errorf("with an edit, the server got Authorization %q, want the edit's Basic credentials", got.Auth)
	}
	err := api.Call(ctx, http.MethodGet, "/fail", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "GET /fail: 404 Not Found: no such thing") {
		t.Errorf("a 404: got %v, want an error naming the call, the status and the answer", err)
	}
}

// TestWaitReady: the wait ends when ready answers, with ready's last error
// when the server exits first or the context ends.
func TestWaitReady(t *testing.T) {
	notYet := errors.New("not yet")
	calls := 0
	err := testserver.WaitReady(context.Background(), nil, time.Millisecond, func() error {
		if calls++; calls < 3 {
			return notYet
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("got %v after %d calls, want nil after 3", err, calls)
	}

	exited := make(chan struct{})
	close(exited)
	err = testserver.WaitReady(context.Background(), exited, time.Hour, func() error { return notYet })
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "not yet") {
		t.Errorf("an exited server: got %v, want an error saying it exited, with the last one", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = testserver.WaitReady(ctx, nil, time.Hour, func() error { return notYet })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not yet") {
		t.Errorf("a cancelled wait: got %v, want context.Canceled with the last error", err)
	}
}

// TestStart: the channel closes when the command ends, and a server still
// running at the cleanup is killed with what it started.
func TestStart(t *testing.T) {
	exited, err := testserver.Start(t, exec.Command("true"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the channel did not close after the command ended")
	}

	var running <-chan struct{}
	t.Run("server", func(t *testing.T) {
		running, err = testserver.Start(t, exec.Command("sh", "-c", "sleep 300 & wait"))
		if err != nil {
			t.Fatal(err)
		}
	})
	select {
	case <-running:
	default:
		t.Error("the server was still running after its test's cleanup")
	}

	if _, err := testserver.Start(t, exec.Command("/nonexistent/server")); err == nil || !strings.Contains(err.Error(), "start /nonexistent/server") {
		t.Errorf("a missing binary: got %v, want an error naming the command", err)
	}
}
