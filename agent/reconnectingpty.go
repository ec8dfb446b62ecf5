package agent

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// Reconnecting PTYs: the sessions of the web terminal (streams of kind
// codersdk.RelayKindPTY). A session is one PTY and its process (the login
// shell, or `shell -c command`), named by the client's reconnect id, with
// the environment and folder of an SSH session. It outlives the streams
// attached to it: with none attached it is kept for
// Options.ReconnectingPTYTimeout, then its process is killed. Each stream
// attached gets the output the session kept (its last ptyRingSize bytes),
// then the live output, and may type and resize. When the process exits the
// session ends: every stream gets the rest of the output and is closed, and
// the same id then starts a new session.
//
// After the codersdk.RelayReply the agent writes raw output bytes to the
// stream and reads codersdk.ReconnectingPTYRequest values framed as by
// relayconn.WriteFrame. The agent closes a stream only when its
// session ended (or the stream broke), so coderd may take the end of the
// stream for the end of the process.
//
// Output goes to every stream at the pace of the slowest one, as a real
// terminal waits for its reader; coderd drops a browser that stops reading
// (workspaceagentpty.go).

const (
	// defaultPTYTimeout is how long a session with no stream attached is
	// kept.
	defaultPTYTimeout = 5 * time.Minute
	// ptyRingSize is how much recent output a session keeps for streams
	// that attach later.
	ptyRingSize = 64 << 10
	// ptyQueue is how many chunks of output wait for a slow stream before
	// the session waits for it.
	ptyQueue = 32
	// ptyKillGrace is how long a session's process has between SIGHUP and
	// SIGKILL.
	ptyKillGrace = 5 * time.Second
)

// ptyManager holds the agent's reconnecting PTY sessions by reconnect id.
type ptyManager struct {
	agent   *Agent
	timeout time.Duration

	mu       sync.Mutex
	sessions map[string]*ptySession
	closed   bool
	running  sync.WaitGroup // one per session whose process runs
}

func newPTYManager(a *Agent, timeout time.Duration) *ptyManager {
	return &ptyManager{agent: a, timeout: timeout, sessions: map[string]*ptySession{}}
}

// ptySession is one reconnecting PTY.
type ptySession struct {
	m    *ptyManager
	id   string
	log  *slog.Logger
	term *terminal
	proc *os.Process
	// done is closed once the process exited and its output went out.
	done chan struct{}

	mu      sync.Mutex
	ring    ring
	clients map[*ptyClient]struct{}
	ended   bool
	// idleGen invalidates idle timers that fired while a stream attached.
	idleGen int
	idle    *quartz.Timer
}

// ptyClient is one stream attached to a session.
type ptyClient struct {
	conn net.Conn
	// out carries output to the stream; the session closes it when it
	// ends, after the last output.
	out chan []byte
	// gone is closed when the stream detached (or broke).
	gone     chan struct{}
	goneOnce sync.Once
}

func (c *ptyClient) leave() { c.goneOnce.Do(func() { close(c.gone) }) }

// serve attaches stream to the session hdr names, starting it when there
// is none, answers the header with reply, and relays until the stream or
// the session ends.
func (m *ptyManager) serve(stream net.Conn, hdr codersdk.RelayHeader, reply func(error) bool, log *slog.Logger) {
	if hdr.PTY == nil || hdr.PTY.Reconnect == "" {
		reply(errors.New("a pty stream needs a reconnect id"))
		return
	}
	c := &ptyClient{conn: stream, out: make(chan []byte, ptyQueue), gone: make(chan struct{})}
	s, err := m.attach(*hdr.PTY, c, log)
	if !reply(err) {
		if s != nil {
			s.detach(c)
		}
		return
	}
	go c.writeOut()
	s.readIn(c)
	s.detach(c)
}

// attach adds c to the live session of p.Reconnect, or to a new one.
func (m *ptyManager) attach(p codersdk.RelayPTY, c *ptyClient, log *slog.Logger) (*ptySession, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("the agent is shutting down")
	}
	s := m.sessions[p.Reconnect]
	if s == nil {
		var err error
		if s, err = m.start(p, log); err != nil {
			return nil, err
		}
		m.sessions[p.Reconnect] = s
	} else {
		log.Debug("web terminal reattached", "reconnect", p.Reconnect)
		_ = s.term.resize(uint32(p.Width), uint32(p.Height))
	}
	s.add(c)
	return s, nil
}

// start opens a PTY and runs p's command in it. m.mu is held.
func (m *ptyManager) start(p codersdk.RelayPTY, log *slog.Logger) (*ptySession, error) {
	cols, rows := uint32(p.Width), uint32(p.Height)
	if cols == 0 || rows == 0 {
		cols, rows = 80, 24
	}
	t, err := openTerminal(cols, rows)
	if err != nil {
		return nil, fmt.Errorf("allocate a terminal: %w", err)
	}
	cmd := m.agent.userCommand(p.Command, "TERM=xterm-256color")
	if err := t.start(cmd); err != nil {
		t.close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	s := &ptySession{
		m: m, id: p.Reconnect, log: log.With("reconnect", p.Reconnect), term: t, proc: cmd.Process,
		done: make(chan struct{}), clients: map[*ptyClient]struct{}{},
	}
	s.log.Info("web terminal started", "command", truncate(p.Command, 200), "pid", cmd.Process.Pid)
	m.running.Add(1)
	go s.run(cmd)
	return s, nil
}

// run copies the output to the ring and the streams until the process
// exited (and its output stopped), then ends the session.
func (s *ptySession) run(cmd *exec.Cmd) {
	defer s.m.running.Done()
	exited := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		drain(s, s.term.master, exited)
	}()
	code := exitCode(cmd.Wait())
	close(exited)
	<-drained
	s.term.close()
	s.end()
	s.log.Info("web terminal ended", "exit_code", code)
	close(s.done)
}

// Write keeps p and sends it to every attached stream, waiting for each.
// Only run writes.
func (s *ptySession) Write(p []byte) (int, error) {
	b := bytes.Clone(p)
	s.mu.Lock()
	s.ring.write(b)
	clients := make([]*ptyClient, 0, len(s.clients))
	for c := range s.clients {
		clients = append(clients, c)
	}
	s.mu.Unlock()
	for _, c := range clients {
		select {
		case c.out <- b:
		case <-c.gone:
		}
	}
	return len(p), nil
}

// add attaches c: its first output is what the session kept.
func (s *ptySession) add(c *ptyClient) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kept := s.ring.bytes(); len(kept) > 0 {
		c.out <- kept // out is new and empty
	}
	s.clients[c] = struct{}{}
	s.idleGen++
	if s.idle != nil {
		s.idle.Stop()
	}
}

// detach removes c; the last stream to go starts the idle timeout, on the
// agent's clock (a timer tagged "agent", "ptyIdle" and the reconnect id):
// an expiry, unlike the kill grace, which bounds a real process.
func (s *ptySession) detach(c *ptyClient) {
	c.leave()
	// A write blocked on a stalled stream returns.
	_ = c.conn.SetWriteDeadline(time.Now())
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.clients[c]; !ok {
		return
	}
	delete(s.clients, c)
	if len(s.clients) > 0 || s.ended {
		return
	}
	s.idleGen++
	gen := s.idleGen
	s.idle = s.m.agent.opts.Clock.AfterFunc(s.m.timeout, func() { s.expire(gen) }, "agent", "ptyIdle", s.id)
}

// expire kills the session if no stream attached since timer gen started.
func (s *ptySession) expire(gen int) {
	s.m.mu.Lock()
	s.mu.Lock()
	idle := gen == s.idleGen && len(s.clients) == 0 && !s.ended
	if idle && s.m.sessions[s.id] == s {
		delete(s.m.sessions, s.id)
	}
	s.mu.Unlock()
	s.m.mu.Unlock()
	if idle {
		s.log.Info("web terminal idle, killing it", "timeout", s.m.timeout)
		s.kill()
	}
}

// kill hangs up the session's process group, and kills it if it is still
// there after ptyKillGrace.
func (s *ptySession) kill() {
	_ = signalGroup(s.proc, syscall.SIGHUP)
	go func() {
		t := time.NewTimer(ptyKillGrace)
		defer t.Stop()
		select {
		case <-s.done:
		case <-t.C:
			_ = signalGroup(s.proc, syscall.SIGKILL)
		}
	}()
}

// end forgets the session and closes its streams once they have its last
// output. Only run calls it, after the last Write.
func (s *ptySession) end() {
	s.m.mu.Lock()
	if s.m.sessions[s.id] == s {
		delete(s.m.sessions, s.id)
	}
	s.m.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	s.idleGen++
	if s.idle != nil {
		s.idle.Stop()
	}
	for c := range s.clients {
		close(c.out)
	}
	clear(s.clients)
}

// writeOut writes c's output to its stream, and closes the stream when
// the session ended or c left.
func (c *ptyClient) writeOut() {
	defer c.conn.Close()
	for {
		select {
		case b, ok := <-c.out:
			if !ok {
				return
			}
			if _, err := c.conn.Write(b); err != nil {
				c.leave()
				return
			}
		case <-c.gone:
			return
		}
	}
}

// readIn applies c's input and resizes to the terminal until the stream
// ends.
func (s *ptySession) readIn(c *ptyClient) {
	for {
		var req codersdk.ReconnectingPTYRequest
		if err := relayconn.ReadFrame(c.conn, &req); err != nil {
			return
		}
		if req.Data != "" {
			if _, err := s.term.master.Write([]byte(req.Data)); err != nil {
				return
			}
		}
		if req.Width > 0 && req.Height > 0 {
			_ = s.term.resize(uint32(req.Width), uint32(req.Height))
		}
	}
}

// closeAll kills every session (at shutdown) and waits for them to end, at
// most ptyKillGrace and a little more.
func (m *ptyManager) closeAll() {
	m.mu.Lock()
	m.closed = true
	sessions := make([]*ptySession, 0, len(m.sessions))
	for _, s := range m.sessions {
		sessions = append(sessions, s)
	}
	clear(m.sessions)
	m.mu.Unlock()
	for _, s := range sessions {
		s.kill()
	}
	waitGroupWithin(&m.running, ptyKillGrace+time.Second)
}

// ring keeps the last ptyRingSize bytes written to it.
type ring struct{ buf []byte }

func (r *ring) write(p []byte) {
	if len(p) >= ptyRingSize {
		r.buf = append(r.buf[:0], p[len(p)-ptyRingSize:]...)
		return
	}
	if len(r.buf)+len(p) > 2*ptyRingSize {
		// Compact, so that the buffer stays under twice the size.
		keep := r.buf[len(r.buf)-(ptyRingSize-len(p)):]
		r.buf = append(r.buf[:0], keep...)
	}
	r.buf = append(r.buf, p...)
}

// bytes returns a copy of the last ptyRingSize bytes.
func (r *ring) bytes() []byte {
	b := r.buf
	if len(b) > ptyRingSize {
		b = b[len(b)-ptyRingSize:]
	}
	return bytes.Clone(b)
}
