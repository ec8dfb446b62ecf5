package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// parts records what a test's steps start and stop.
type parts struct {
	stack Stack
	log   []string
}

func (p *parts) step(name string, fail error) Step {
	return Step{Name: "start " + name, Run: func(ctx context.Context) error {
		if fail != nil {
			return fail
		}
		p.log = append(p.log, "start "+name)
		p.stack.Push(name, func(context.Context) error {
			p.log = append(p.log, "stop "+name)
			return nil
		})
		return nil
	}}
}

// TestFailedStepStopsWhatStarted: a step that fails stops nothing itself;
// the error names it, the steps after it do not run, and the stack stops
// what the steps before it started, last first.
func TestFailedStepStopsWhatStarted(t *testing.T) {
	p := &parts{}
	boom := errors.New("address already in use")
	err := Start(context.Background(), slog.New(slog.DiscardHandler), []Step{p.step("a", nil), p.step("b", nil), p.step("c", boom), p.step("d", nil)})
	if !errors.Is(err, boom) || err.Error() != "start c: address already in use" {
		t.Fatalf("Start: %v, want the failure wrapped in the step's name", err)
	}
	p.stack.Push("broken", func(context.Context) error { return errors.New("stuck") })
	if err := p.stack.Stop(context.Background()); err == nil || err.Error() != "stop broken: stuck" {
		t.Errorf("Stop: %v, want the stop that failed", err)
	}
	if want := []string{"start a", "start b", "stop b", "stop a"}; !slices.Equal(p.log, want) {
		t.Errorf("ran %q, want %q", p.log, want)
	}
	if err := p.stack.Stop(context.Background()); err != nil || len(p.log) != 4 {
		t.Errorf("a second Stop stopped something again: %v %q", err, p.log)
	}
}

// TestInterruptedStartIsNoError: a canceled context ends the start-up
// between steps without an error, and Go's goroutine is waited for.
func TestInterruptedStartIsNoError(t *testing.T) {
	p := &parts{}
	ctx, cancel := context.WithCancel(context.Background())
	ended := false
	steps := []Step{p.step("a", nil), {Name: "loop", Run: func(ctx context.Context) error {
		p.stack.Go(ctx, "loop", func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(10 * time.Millisecond) // the goroutine's own work after the cancel, which Stop must wait for
			ended = true
			return nil
		})
		cancel()
		return nil
	}}, p.step("b", nil)}
	if err := Start(ctx, slog.New(slog.DiscardHandler), steps); err != nil || ctx.Err() == nil {
		t.Fatalf("Start: %v (ctx %v), want nil after the cancel", err, ctx.Err())
	}
	_ = p.stack.Stop(context.Background())
	if !ended {
		t.Error("Stop returned before the goroutine Go started ended")
	}
	if want := []string{"start a", "stop a"}; !slices.Equal(p.log, want) {
		t.Errorf("ran %q, want %q", p.log, want)
	}
}
