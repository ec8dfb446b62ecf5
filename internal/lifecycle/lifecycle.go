// Package lifecycle starts a system as a list of named steps and stops it in
// reverse. It is the start-up and shutdown of both `coder server` (package
// controlplane) and `coder appliance up` (package appliance): each step
// pushes the stop of what it started onto a [Stack] before the next step can
// fail, so a failure at any step stops everything started so far, last
// first, and the error names the step.
//
// It owns the order and the bookkeeping only: it knows nothing of what a
// step starts, restarts nothing (package appliance supervises components)
// and never logs above debug level except for a stop that failed.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// Step is one part of a start-up. Run starts the part and pushes its stop
// on the stack before it returns; an error it returns is wrapped in Name.
type Step struct {
	Name string
	Run  func(context.Context) error
}

// Start runs steps in order. It returns the first error wrapped in its
// step's name, or nil when every step ran or ctx was canceled first (the
// caller tells the two apart with ctx.Err()): an interrupted start-up is
// not an error. What the steps started stays on their stack for the caller
// to stop.
func Start(ctx context.Context, log *slog.Logger, steps []Step) error {
	for _, step := range steps {
		if ctx.Err() != nil {
			log.Info("start-up interrupted", "before", step.Name)
			return nil
		}
		log.Debug("start-up", "step", step.Name)
		if err := step.Run(ctx); err != nil {
			if ctx.Err() != nil {
				log.Info("start-up interrupted", "step", step.Name, "err", err)
				return nil
			}
			return fmt.Errorf("%s: %w", step.Name, err)
		}
	}
	return nil
}

// Stack is what has been started so far, as stop functions that run last
// in, first out. The zero value is empty; Log may be set to hear stops.
type Stack struct {
	Log   *slog.Logger
	parts []part
}

type part struct {
	name string
	stop func(context.Context) error
}

// Push registers stop, which ends the part called name. ctx bounds a
// graceful stop; a part that cannot stop gracefully in time stops hard.
func (s *Stack) Push(name string, stop func(ctx context.Context) error) {
	s.parts = append(s.parts, part{name: name, stop: stop})
}

// Stop stops every part, the last pushed first, and forgets them. It goes
// on after an error and returns them all.
func (s *Stack) Stop(ctx context.Context) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	for i := len(s.parts) - 1; i >= 0; i-- {
		p := s.parts[i]
		log.Debug("stopping", "part", p.name)
		if err := p.stop(ctx); err != nil {
			log.Error("stop "+p.name, "err", err)
			errs = append(errs, fmt.Errorf("stop %s: %w", p.name, err))
		}
	}
	s.parts = nil
	return errors.Join(errs...)
}

// Go runs fn in a goroutine until the stop: its context is canceled then,
// and the stop waits for fn to return. An error fn returns before that is
// logged (background loops do not end the system).
func (s *Stack) Go(ctx context.Context, name string, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(ctx); err != nil && ctx.Err() == nil && s.Log != nil {
			s.Log.Error("background task stopped", "task", name, "err", err)
		}
	}()
	s.Push(name, func(context.Context) error {
		cancel()
		<-done
		return nil
	})
}
