package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Supervision of the built-in PostgreSQL: the OOM killer, a crash or a
// hang must not leave the appliance answering 503 until someone restarts
// it. The supervisor asks the server a query every ProbeEvery; when it has
// not answered for Deadline (a crash, or a hang such as SIGSTOP) it stops
// what is left (the helper, a stale or stopped postmaster) and starts the
// server again on the same port and data, which coderd's pool and pubsub
// reconnect to by themselves. A server that keeps failing (MaxRestarts
// restarts within Window) makes Run return an error that names it, so `up`
// exits non-zero and systemd restarts the whole appliance.

// restartable is what the supervisor restarts (postgres.Server).
type restartable interface {
	Ping(ctx context.Context) error
	Kill(ctx context.Context) error
	Start(ctx context.Context) error
}

// supervisor watches one component.
type supervisor struct {
	name string
	c    restartable
	log  *slog.Logger
	// ProbeEvery spaces the probes; Deadline is how long the component may
	// fail them before it is restarted.
	probeEvery, deadline time.Duration
	// maxRestarts restarts within window is giving up.
	maxRestarts int
	window      time.Duration
	// onRestart, when set, hears each restart and its cause.
	onRestart func(restarts int, cause error)
	now       func() time.Time
}

func newPostgresSupervisor(c restartable, log *slog.Logger, onRestart func(int, error)) *supervisor {
	return &supervisor{name: "postgres", c: c, log: log, probeEvery: time.Second, deadline: 5 * time.Second,
		maxRestarts: 5, window: 10 * time.Minute, onRestart: onRestart, now: time.Now}
}

// Run watches until ctx ends (nil) or the component keeps failing.
func (s *supervisor) Run(ctx context.Context) error {
	var restarts []time.Time
	failingSince := time.Time{}
	var lastErr error
	tick := time.NewTicker(s.probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, s.probeEvery)
		err := s.c.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			failingSince = time.Time{}
			continue
		}
		now := s.now()
		if failingSince.IsZero() {
			failingSince = now
			s.log.Warn("component does not answer", "component", s.name, "err", err)
		}
		if now.Sub(failingSince) < s.deadline {
			continue
		}
		// Restart it, unless it has been restarted too often already.
		kept := restarts[:0]
		for _, t := range restarts {
			if now.Sub(t) < s.window {
				kept = append(kept, t)
			}
		}
		restarts = kept
		if len(restarts) >= s.maxRestarts {
			return fmt.Errorf("%s keeps failing: restarted %d times in %s, last: %w", s.name, len(restarts), s.window, errors.Join(lastErr, err))
		}
		restarts = append(restarts, now)
		lastErr = err
		s.log.Error("restarting a component that stopped answering", "component", s.name, "for", now.Sub(failingSince).Round(time.Millisecond), "err", err, "restart", len(restarts))
		if s.onRestart != nil {
			s.onRestart(len(restarts), err)
		}
		// It does not answer: no graceful stop to wait for (PostgreSQL
		// recovers from its WAL on the next start).
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if serr := s.c.Kill(stopCtx); serr != nil {
			s.log.Warn("stop before restart", "component", s.name, "err", serr)
		}
		cancel()
		startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		serr := s.c.Start(startCtx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if serr != nil {
			lastErr = serr
			wait := min(time.Second<<(len(restarts)-1), 30*time.Second)
			s.log.Error("restart failed", "component", s.name, "err", serr, "next_in", wait)
			// Keep failingSince: the next probe after the wait fails and
			// restarts it again, counted against the limit.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			continue
		}
		s.log.Info("component restarted", "component", s.name, "restart", len(restarts))
		failingSince = time.Time{}
	}
}
