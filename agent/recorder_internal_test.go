package agent

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"airgapcoder/codersdk"
)

// recorder keeps, in order, what a fake of these tests was sent, and wakes
// the tests waiting on it at every addition. Make one with newRecorder.
type recorder[T any] struct {
	mu       sync.Mutex
	failures int // calls of post still to fail
	items    []T
	changed  chan struct{} // closed and replaced on every addition
}

// newRecorder returns an empty recorder whose first failures posts fail.
func newRecorder[T any](failures int) *recorder[T] {
	return &recorder[T]{failures: failures, changed: make(chan struct{})}
}

// post records v as coderd would, or fails as a restarting coderd would
// while failures remain.
func (r *recorder[T]) post(v T) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures > 0 {
		r.failures--
		return &codersdk.Error{StatusCode: http.StatusServiceUnavailable, Response: codersdk.Response{Message: "coderd is restarting"}}
	}
	r.addLocked(v)
	return nil
}

// add records v.
func (r *recorder[T]) add(v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addLocked(v)
}

func (r *recorder[T]) addLocked(v T) {
	r.items = append(r.items, v)
	close(r.changed)
	r.changed = make(chan struct{})
}

// all returns a copy of what was recorded.
func (r *recorder[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.items)
}

// waitFor waits until cond holds for what was recorded, failing the test
// with what it waited for after timeout.
func (r *recorder[T]) waitFor(t *testing.T, timeout time.Duration, what string, cond func([]T) bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		items, changed := slices.Clone(r.items), r.changed
		r.mu.Unlock()
		if cond(items) {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("not within %s: %s; recorded %+v", timeout, what, r.all())
		}
	}
}
