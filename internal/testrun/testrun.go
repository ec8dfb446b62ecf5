// Package testrun runs one of the project's components for a test the way
// its owner would: Run(ctx) in the background, its readiness awaited, and
// at the test's end (or when the test stops it) its context cancelled and
// Run's return awaited and checked. Components keep the project's
// contract (docs in STYLE.md, habit 4): Run returns nil once its context
// ends, and a Ready channel, where there is one, is closed once the
// component serves.
//
// It owns no component and starts nothing but the one goroutine that runs
// Run, which t's cleanup waits for. It is for tests only.
package testrun

import (
	"context"
	"sync"
	"testing"
	"time"
)

// ReadyTimeout bounds the wait for a component's readiness, and
// StopTimeout the wait for Run to return once its context ends.
const (
	ReadyTimeout = 2 * time.Minute
	StopTimeout  = 30 * time.Second
)

// Start runs run (a component's Run) in the background. When ready is not
// nil, Start returns once it is closed, and fails the test if run returns
// first or ReadyTimeout passes. t's cleanup cancels run's context and
// fails the test unless run returns nil within StopTimeout. name says
// which component, in failure messages.
func Start(t testing.TB, name string, run func(context.Context) error, ready <-chan struct{}) {
	t.Helper()
	_, done := background(t, name, run)
	if ready == nil {
		return
	}
	select {
	case <-ready:
	case err := <-done:
		done <- err // for the cleanup
		t.Fatalf("%s Run returned before it was ready: %v", name, err)
	case <-time.After(ReadyTimeout):
		t.Fatalf("%s not ready within %v", name, ReadyTimeout)
	}
}

// Background runs run (a component's Run) in the background, as Start
// does without a readiness to wait for, and returns stop, which cancels
// run's context and fails the test unless run returns nil within
// StopTimeout: for a test that checks what the component did once it
// stopped. t's cleanup calls stop too; calls after the first do nothing.
func Background(t testing.TB, name string, run func(context.Context) error) (stop func()) {
	t.Helper()
	stop, _ = background(t, name, run)
	return stop
}

// background starts run with a context of its own and registers stop on
// t's cleanup; run's return arrives on done, which stop reads.
func background(t testing.TB, name string, run func(context.Context) error) (stop func(), done chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		t.Helper()
		once.Do(func() {
			t.Helper()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s Run: %v", name, err)
				}
			case <-time.After(StopTimeout):
				t.Errorf("%s Run did not return within %v of its context ending", name, StopTimeout)
			}
		})
	}
	t.Cleanup(stop)
	return stop, done
}
