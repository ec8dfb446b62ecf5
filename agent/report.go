package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/clockwait"
)

// The agent's reports to coderd that must survive coderd restarts: its
// lifecycle states, in order, and the output of its scripts.

// lifecycleReporter sends lifecycle states to coderd in order, retrying
// while coderd is away.
type lifecycleReporter struct {
	agent *Agent

	mu      sync.Mutex
	queue   []codersdk.PostAgentLifecycleRequest
	last    *codersdk.PostAgentLifecycleRequest // last one coderd accepted
	wake    chan struct{}
	drained chan struct{} // closed when the queue is empty
}

func newLifecycleReporter(a *Agent) *lifecycleReporter {
	d := make(chan struct{})
	close(d)
	return &lifecycleReporter{agent: a, wake: make(chan struct{}, 1), drained: d}
}

// set queues a state change.
func (l *lifecycleReporter) set(state string) {
	l.mu.Lock()
	l.queue = append(l.queue, codersdk.PostAgentLifecycleRequest{State: state, ChangedAt: time.Now().UTC()})
	if len(l.queue) == 1 {
		l.drained = make(chan struct{})
	}
	l.mu.Unlock()
	l.agent.log.Info("lifecycle", "state", state)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// resend sends the last accepted state again (after a reconnect, in case
// coderd lost it).
func (l *lifecycleReporter) resend() {
	l.mu.Lock()
	if l.last != nil && len(l.queue) == 0 {
		l.queue = append(l.queue, *l.last)
		l.drained = make(chan struct{})
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// wait waits until every queued state was sent, or ctx ends.
func (l *lifecycleReporter) wait(ctx context.Context) {
	l.mu.Lock()
	d := l.drained
	l.mu.Unlock()
	select {
	case <-d:
	case <-ctx.Done():
	}
}

func (l *lifecycleReporter) run(ctx context.Context) {
	b := l.agent.newBackoff()
	for {
		l.mu.Lock()
		var next *codersdk.PostAgentLifecycleRequest
		if len(l.queue) > 0 {
			n := l.queue[0]
			next = &n
		}
		l.mu.Unlock()
		if next == nil {
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
				continue
			}
		}
		err := l.agent.api().PostAgentLifecycle(ctx, *next)
		if err != nil && !permanent(err) {
			if ctx.Err() != nil {
				return
			}
			l.agent.log.Debug("report lifecycle; retrying", "state", next.State, "err", err)
			if !l.agent.backoffWait(ctx, b, nil, "lifecycle") {
				return
			}
			continue
		}
		if err != nil {
			l.agent.log.Error("report lifecycle", "state", next.State, "err", err)
		}
		b.Reset()
		l.mu.Lock()
		l.queue = l.queue[1:]
		l.last = next
		if len(l.queue) == 0 {
			close(l.drained)
		}
		l.mu.Unlock()
	}
}

// maxBufferedLogs bounds the output kept while coderd is away.
const maxBufferedLogs = 10000

// logSender batches script output to coderd.
type logSender struct {
	agent *Agent

	// sending serializes send: the loop and a final flush may both call
	// it, and each removes the lines it sent from the front of buf.
	sending sync.Mutex

	mu      sync.Mutex
	buf     []codersdk.AgentLogInput
	dropped int
	full    bool // coderd stores no more
	wake    chan struct{}
}

func newLogSender(a *Agent) *logSender {
	return &logSender{agent: a, wake: make(chan struct{}, 1)}
}

// add queues one line of output; source is the script's LogSourceID ("" for
// the agent itself).
func (s *logSender) add(source, level, line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.full {
		return
	}
	if len(s.buf) >= maxBufferedLogs {
		s.dropped++
		return
	}
	s.buf = append(s.buf, codersdk.AgentLogInput{CreatedAt: time.Now().UTC(), Level: level, Output: line, Source: source})
	if len(s.buf) >= 100 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (s *logSender) run(ctx context.Context) {
	t := s.agent.opts.Clock.NewTicker(s.agent.opts.LogFlushInterval, "agent", "logFlush")
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
		_ = s.send(ctx)
	}
}

// flush sends what is buffered, retrying until ctx ends.
func (s *logSender) flush(ctx context.Context) {
	for s.send(ctx) != nil && ctx.Err() == nil {
		if !clockwait.Sleep(ctx, s.agent.opts.Clock, 100*time.Millisecond, nil, "agent", "logFlush") {
			return
		}
	}
}

// send posts up to 1000 buffered lines; they stay buffered if coderd is
// unreachable.
func (s *logSender) send(ctx context.Context) error {
	s.sending.Lock()
	defer s.sending.Unlock()
	s.mu.Lock()
	if s.dropped > 0 && len(s.buf) < maxBufferedLogs {
		s.buf = append(s.buf, codersdk.AgentLogInput{CreatedAt: time.Now().UTC(), Level: codersdk.LogLevelWarn,
			Output: fmt.Sprintf("coder agent: %d lines of output were dropped while coderd was unreachable", s.dropped)})
		s.dropped = 0
	}
	n := min(len(s.buf), 1000)
	batch := append([]codersdk.AgentLogInput(nil), s.buf[:n]...)
	s.mu.Unlock()
	if n == 0 {
		return nil
	}
	err := s.agent.api().PostAgentLogs(ctx, codersdk.PostAgentLogsRequest{Logs: batch})
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		s.buf = s.buf[n:]
	case codersdk.IsStatus(err, http.StatusRequestEntityTooLarge):
		s.agent.log.Warn("coderd stores no more script output", "err", err)
		s.full, s.buf = true, nil
		return nil
	case permanent(err):
		s.agent.log.Error("send script output", "err", err)
		s.buf = s.buf[n:]
		return nil
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		s.agent.log.Debug("send script output; will retry", "err", err)
	}
	return err
}
