package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coder/quartz"
	"github.com/thejerf/suture/v4"

	"airgapcoder/mirror"
)

// Supervision: the OOM killer, a crash or a hang of a component must not
// leave the appliance answering 503 until someone restarts it. `up` runs
// the components it can restart in place (the built-in PostgreSQL, the
// mirror) as services of one suture tree (docs/decisions.md says why
// suture). Each is a [supervised]: serve runs it until it fails, restart
// gets it ready to serve again, and a restart policy spaces the restarts
// with backoff and gives up when a component keeps failing (maxRestarts
// within window): then the tree ends with an error naming the component,
// `up` exits non-zero and systemd restarts the whole appliance. coderd is
// not restarted in place (its failure ends `up` the same way), and the
// built-in provisioners reconnect by themselves.
//
// The probes, the waits between restarts and the times they are counted
// from are on a quartz.Clock (the real one in `up`), its timers tagged
// "appliance", then "probe" or "restart", then the component's name:
// tests step a quartz.Mock instead of waiting.

// supervised is one component as a suture service. suture calls Serve
// again each time it returns while the tree runs.
type supervised struct {
	name string
	// serve runs the component until ctx ends (then its result does not
	// matter) or it fails: an error, or nil for "stopped by itself".
	serve func(ctx context.Context) error
	// restart, when set, gets the component ready to serve again after a
	// failure (stop what is left of it, start it). An error counts as
	// another failure.
	restart func(ctx context.Context) error
	// maxRestarts restarts within window is giving up.
	maxRestarts int
	window      time.Duration
	// onRestart, when set, hears each restart and its cause.
	onRestart func(restarts int, cause error)
	log       *slog.Logger
	clock     quartz.Clock

	// Across calls of Serve (suture never runs two at once).
	cause    error // why the last Serve returned; nil before the first
	restarts []time.Time
	backoff  *backoff.ExponentialBackOff
	started  time.Time
}

// healthyFor is how long a component must have served for its backoff to
// start again from the shortest wait.
const healthyFor = time.Minute

// newSupervised supervises a component: serve and restart as in
// supervised, its waits and times on clock.
func newSupervised(name string, serve, restart func(context.Context) error, clock quartz.Clock, log *slog.Logger, onRestart func(int, error)) *supervised {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 500*time.Millisecond, 30*time.Second
	return &supervised{name: name, serve: serve, restart: restart, maxRestarts: 5, window: 10 * time.Minute,
		onRestart: onRestart, log: log, clock: clock, backoff: b}
}

func (s *supervised) String() string { return s.name }

// Serve restarts the component if it failed before, then serves it.
func (s *supervised) Serve(ctx context.Context) error {
	if s.cause != nil {
		if err := s.restartAfter(ctx, s.cause); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil // stopped during the restart: nothing to serve
	}
	s.started = s.clock.Now()
	err := s.serve(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("stopped by itself")
	}
	s.log.Error("component failed", "component", s.name, "err", err)
	s.cause = err
	return err
}

// restartAfter waits its turn and restarts the component, or gives up.
func (s *supervised) restartAfter(ctx context.Context, cause error) error {
	now := s.clock.Now()
	if now.Sub(s.started) >= healthyFor {
		s.backoff.Reset()
	}
	kept := s.restarts[:0]
	for _, t := range s.restarts {
		if now.Sub(t) < s.window {
			kept = append(kept, t)
		}
	}
	s.restarts = kept
	if len(s.restarts) >= s.maxRestarts {
		return gaveUp{fmt.Errorf("%s keeps failing: restarted %d times in %s, last: %w", s.name, len(s.restarts), s.window, cause)}
	}
	s.restarts = append(s.restarts, now)
	n := len(s.restarts)
	wait := s.backoff.NextBackOff()
	s.log.Error("restarting a component", "component", s.name, "restart", n, "in", wait.Round(time.Millisecond), "cause", cause)
	if s.onRestart != nil {
		s.onRestart(n, cause)
	}
	t := s.clock.NewTimer(wait, "appliance", "restart", s.name)
	select {
	case <-ctx.Done():
		t.Stop()
		return nil
	case <-t.C:
	}
	if s.restart != nil {
		if err := s.restart(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Error("restart failed", "component", s.name, "restart", n, "err", err)
			s.cause = fmt.Errorf("restart: %w", err)
			return s.cause
		}
	}
	s.log.Info("component restarted", "component", s.name, "restart", n)
	return nil
}

// gaveUp ends the supervision tree (suture's ErrTerminateSupervisorTree)
// with an error that reads as the reason alone.
type gaveUp struct{ err error }

func (g gaveUp) Error() string        { return g.err.Error() }
func (g gaveUp) Unwrap() error        { return g.err }
func (g gaveUp) Is(target error) bool { return target == suture.ErrTerminateSupervisorTree }

// newSupervisionTree is the tree the components run in. The restart policy
// is supervised's: suture's own backoff (for a tree whose services fail
// together) is set out of reach.
func newSupervisionTree(log *slog.Logger) *suture.Supervisor {
	return suture.New("appliance", suture.Spec{
		FailureThreshold: math.MaxFloat64, Timeout: 30 * time.Second,
		EventHook: func(e suture.Event) {
			switch e := e.(type) {
			case suture.EventServicePanic:
				log.Error("component panicked; restarting it", "component", e.ServiceName, "panic", e.PanicMsg, "stack", e.Stacktrace)
			case suture.EventStopTimeout:
				log.Error("component did not stop in time", "component", e.ServiceName)
			}
		},
	})
}

// pinger is a component whose health is a probe (postgres.Server).
type pinger interface {
	Ping(ctx context.Context) error
}

// probe returns once c has failed its checks for deadline on clock without
// a success in between (a crash, or a hang such as SIGSTOP), with the last
// failure; nil when ctx ends. It checks every `every` on clock (a
// TickerFunc tagged "appliance", "probe" and name). Each check is bounded
// by every in real time: that bounds I/O with a real process, which no
// step of a mock clock stands in for.
func probe(ctx context.Context, c pinger, name string, every, deadline time.Duration, clock quartz.Clock) error {
	var failingSince time.Time
	err := clock.TickerFunc(ctx, every, func() error {
		pctx, cancel := context.WithTimeout(ctx, every)
		err := c.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			failingSince = time.Time{}
			return nil
		}
		now := clock.Now()
		if failingSince.IsZero() {
			failingSince = now
		}
		if d := now.Sub(failingSince); d >= deadline {
			return fmt.Errorf("no answer for %s: %w", d.Round(time.Second), err)
		}
		return nil
	}, "appliance", "probe", name).Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// restartablePostgres is what supervision restarts (postgres.Server).
type restartablePostgres interface {
	pinger
	Kill(ctx context.Context) error
	Start(ctx context.Context) error
}

// superviseServer supervises a server such as the built-in PostgreSQL: it
// is probed every second and restarted when it has not answered for 5 s.
// A server that does not answer gets no graceful stop to wait for
// (PostgreSQL recovers from its WAL on the next start); it starts again on
// the same port and data, which coderd's pool and pubsub reconnect to.
// The probes and the 5 s are on clock.
func superviseServer(name string, c restartablePostgres, clock quartz.Clock, log *slog.Logger, onRestart func(int, error)) *supervised {
	s := newSupervised(name, nil, nil, clock, log, onRestart)
	s.serve = func(ctx context.Context) error { return probe(ctx, c, name, time.Second, 5*time.Second, clock) }
	s.restart = func(ctx context.Context) error {
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := c.Kill(stopCtx); err != nil {
			log.Warn("stop before restart", "component", name, "err", err)
		}
		cancel()
		startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return c.Start(startCtx)
	}
	return s
}

// mirrorService runs the mirror. A mirror that stops serving is started
// again on the address it first listened on (a port chosen at start-up
// stays the one templates and the certificate name).
type mirrorService struct {
	opts mirror.ServerOptions

	mu   sync.Mutex
	srv  *mirror.Server // the server the next serve runs
	ln   net.Listener
	addr string // where it first listened
}

// newMirrorService listens at opts.Address (an error here is a start-up
// error, not a failure to restart) and builds the first server.
func newMirrorService(opts mirror.ServerOptions) (*mirrorService, error) {
	m := &mirrorService{opts: opts}
	if err := m.listen(opts.Address); err != nil {
		return nil, err
	}
	m.addr = m.ln.Addr().String()
	return m, nil
}

func (m *mirrorService) listen(addr string) error {
	if addr == "" {
		addr = mirror.DefaultAddress
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("mirror: listen: %w", err)
	}
	opts := m.opts
	opts.Listener = ln
	srv, err := mirror.NewServer(opts)
	if err != nil {
		ln.Close()
		return err
	}
	m.mu.Lock()
	m.srv, m.ln = srv, ln
	m.mu.Unlock()
	return nil
}

// server is the mirror serving now (or about to).
func (m *mirrorService) server() *mirror.Server {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.srv
}

func (m *mirrorService) serve(ctx context.Context) error {
	srv := m.server()
	err := srv.Run(ctx)
	// A mirror that failed may leave its listener open.
	m.mu.Lock()
	m.ln.Close()
	m.mu.Unlock()
	return err
}

func (m *mirrorService) restart(context.Context) error { return m.listen(m.addr) }

// stopServing closes the listener under the mirror, as a failing socket
// would: tests use it to see the mirror restarted.
func (m *mirrorService) stopServing() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ln.Close()
}
