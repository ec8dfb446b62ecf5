package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// shutdown is what Run has started so far, as stop functions that run last
// in, first out. A start-up step pushes each part right after starting it,
// before anything else can fail, so whatever fails next, the part stops.
type shutdown struct {
	log   *slog.Logger
	parts []stopper
}

type stopper struct {
	name string
	stop func(context.Context) error
}

// push registers stop, which ends the part called name. ctx bounds a
// graceful stop; a part that cannot stop gracefully in time stops hard.
func (s *shutdown) push(name string, stop func(ctx context.Context) error) {
	s.parts = append(s.parts, stopper{name: name, stop: stop})
}

// run stops every part, the last pushed first, and forgets them. It goes
// on after an error and returns them all.
func (s *shutdown) run(ctx context.Context) error {
	var errs []error
	for i := len(s.parts) - 1; i >= 0; i-- {
		p := s.parts[i]
		s.log.Debug("stopping", "part", p.name)
		if err := p.stop(ctx); err != nil {
			s.log.Error("stop "+p.name, "err", err)
			errs = append(errs, fmt.Errorf("stop %s: %w", p.name, err))
		}
	}
	s.parts = nil
	return errors.Join(errs...)
}

// goRun runs fn in a goroutine until the shutdown: its context is canceled
// then, and the shutdown waits for fn to return. An error fn returns before
// that is logged (background loops do not end the server).
func (s *shutdown) goRun(ctx context.Context, name string, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("background task stopped", "task", name, "err", err)
		}
	}()
	s.push(name, func(context.Context) error {
		cancel()
		<-done
		return nil
	})
}
