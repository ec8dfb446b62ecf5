package wsproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// Agents connected to the proxy. An agent whose CODER_AGENT_URL is the
// proxy's access URL dials GET /api/v2/workspaceagents/me/connect here
// with its token, exactly as it would dial coderd. The proxy opens an
// OpAgent stream on its relay session with that token; the primary
// answers the agent's id (or refuses, and the agent hears the primary's
// status and message before any upgrade), records the agent connected and
// keeps it so while the stream is open. Then the proxy accepts the
// agent's connection and runs the yamux client on it (the agent runs the
// server), keyed by the agent's id. When the agent's connection ends the
// proxy closes the OpAgent stream (the primary records the agent
// disconnected); when the primary ends the stream or refuses the agent the
// proxy closes the agent's connection (the agent reconnects).
//
// When the relay session drops, the OpAgent streams go with it, but the
// agents' connections stay: users of the region connected to them through
// the proxy keep their connections and can open new ones. Each agent is
// registered again, with the token it connected with, as soon as the next
// relay session is up (the primary counts it disconnected meanwhile and
// cannot reach it). A refusal then (the workspace was deleted) closes its
// connection.
//
// Spare connections (?spare=1) are not kept by the proxy: it answers them
// 501 in plain text, which the agent reads as "the raw upgrade does not
// reach coderd" and so leaves spares alone for the rest of its session,
// without retrying or logging above debug (agent/spares.go). Every
// connection to an agent here is a stream of its session.

// agentConn is an agent's live connection to this proxy.
type agentConn struct {
	id     string // guarded by agents.mu: a new build gives the token a new row
	mux    *yamux.Session
	token  string // the agent's token, to register it again
	remote string // the agent's address

	mu     sync.Mutex
	ctrl   net.Conn       // the OpAgent stream
	via    *yamux.Session // the relay session ctrl is a stream of
	closed bool
}

// control is the agent's current OpAgent stream and the relay session it
// is a stream of.
func (a *agentConn) control() (net.Conn, *yamux.Session) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ctrl, a.via
}

// setControl makes ctrl, a stream of relay session via, the agent's
// OpAgent stream; it reports false (and closes ctrl) when the agent's
// connection is already closed.
func (a *agentConn) setControl(ctrl net.Conn, via *yamux.Session) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		_ = ctrl.Close()
		return false
	}
	a.ctrl, a.via = ctrl, via
	return true
}

// close ends the agent's connection and its OpAgent stream.
func (a *agentConn) close() {
	a.mu.Lock()
	a.closed = true
	ctrl := a.ctrl
	a.mu.Unlock()
	_ = a.mux.Close()
	_ = ctrl.Close()
}

// agentAnswerWait bounds an agent's answer to a stream header, as coderd
// bounds it.
const agentAnswerWait = 15 * time.Second

// open opens a stream to the agent with header hdr and waits for the
// agent's answer. A refusal by the agent (nothing listens on the port) is
// a 502 with its reason.
func (a *agentConn) open(ctx context.Context, hdr codersdk.RelayHeader) (net.Conn, error) {
	stream, err := a.mux.OpenStream()
	if err != nil {
		return nil, apiError(http.StatusServiceUnavailable, "The agent's connection to the workspace proxy is closing; try again in a moment", err.Error())
	}
	_ = stream.SetDeadline(time.Now().Add(agentAnswerWait))
	stop := context.AfterFunc(ctx, func() { _ = stream.SetDeadline(time.Now()) })
	defer stop()
	if err := relayconn.WriteFrame(stream, hdr); err != nil {
		_ = stream.Close()
		return nil, apiError(http.StatusBadGateway, "Send the connection request to the agent", err.Error())
	}
	var reply codersdk.RelayReply
	if err := relayconn.ReadFrame(stream, &reply); err != nil {
		_ = stream.Close()
		return nil, apiError(http.StatusBadGateway, "The agent did not answer the connection request", err.Error())
	}
	if reply.Error != "" {
		_ = stream.Close()
		return nil, &agentRefusedError{reason: reply.Error}
	}
	_ = stream.SetDeadline(time.Time{})
	return stream, nil
}

// agentRefusedError is an agent's refusal of a stream's target (nothing
// listens on the port): a 502 for the user.
type agentRefusedError struct{ reason string }

func (e *agentRefusedError) Error() string { return "The agent could not connect: " + e.reason }

// agentRegistry maps agent ids to the agents connected to this proxy.
type agentRegistry struct {
	mu    sync.Mutex
	conns map[string]*agentConn
}

// register makes a the connection of agentID and returns the one it
// replaces.
func (r *agentRegistry) register(agentID string, a *agentConn) *agentConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		r.conns = map[string]*agentConn{}
	}
	old := r.conns[agentID]
	a.id = agentID
	r.conns[agentID] = a
	return old
}

// move re-keys a under agentID; it returns the connection it displaced
// and whether a is still registered.
func (r *agentRegistry) move(a *agentConn, agentID string) (*agentConn, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns[a.id] != a {
		return nil, false
	}
	delete(r.conns, a.id)
	old := r.conns[agentID]
	a.id = agentID
	r.conns[agentID] = a
	return old, true
}

// unregister removes a unless a newer connection replaced it.
func (r *agentRegistry) unregister(a *agentConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns[a.id] == a {
		delete(r.conns, a.id)
	}
}

func (r *agentRegistry) get(agentID string) *agentConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[agentID]
}

func (r *agentRegistry) idOf(a *agentConn) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return a.id
}

// count is the number of agents connected here.
func (r *agentRegistry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// agentConnect serves GET /api/v2/workspaceagents/me/connect: an agent's
// relay connection, for as long as it stays up and the primary keeps it
// registered.
func (s *Server) agentConnect(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("spare") != "" {
		// Plain text, not the API's JSON: see the comment at the top.
		http.Error(w, "workspace proxies keep no spare agent connections; every connection is a stream of the agent's session", http.StatusNotImplemented)
		return
	}
	if !s.track() {
		writeJSON(w, http.StatusServiceUnavailable, codersdk.Response{Message: "This workspace proxy is shutting down; the agent reconnects"})
		return
	}
	defer s.handlers.Done()
	token := r.Header.Get(codersdk.SessionTokenHeader)
	if token == "" {
		writeError(w, apiError(http.StatusUnauthorized, "Agents authenticate with their agent token in the "+codersdk.SessionTokenHeader+" header (CODER_AGENT_TOKEN)", ""))
		return
	}
	mux := s.session()
	if mux == nil {
		writeError(w, apiError(http.StatusServiceUnavailable, "This workspace proxy has no relay session to the primary now; the agent retries", ""))
		return
	}
	ctrl, agentID, err := s.registerAgent(r.Context(), mux, token, r.RemoteAddr)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	nc := s.acceptOrLog(ctx, w, r, ctrl, "agent connection", "agent", agentID)
	if nc == nil {
		return
	}
	amux, err := yamux.Client(relayconn.CoalescedYamuxConn(nc), s.yamuxConfig())
	if err != nil {
		_ = nc.Close()
		_ = ctrl.Close()
		s.log.Warn("start an agent's relay session", "agent", agentID, "err", err)
		return
	}
	a := &agentConn{mux: amux, ctrl: ctrl, via: mux, token: token, remote: r.RemoteAddr}
	if old := s.agents.register(agentID, a); old != nil {
		old.close() // the agent reconnected before its old connection was seen dead
	}
	log := s.log.With("remote", r.RemoteAddr)
	log.Info("workspace agent connected", "agent", agentID, "agents_on_proxy", s.agents.count())
	began := s.clock.Now()
	reason := s.serveAgent(ctx, a, log)
	a.close()
	s.agents.unregister(a)
	log.Info("workspace agent disconnected", "agent", s.agents.idOf(a), "reason", reason, "connected_for", s.clock.Since(began).Round(time.Millisecond))
}

// serveAgent keeps agent a registered with the primary while its
// connection stays up, registering it again after the relay session
// dropped, and returns why it ended. The caller closes a.
func (s *Server) serveAgent(ctx context.Context, a *agentConn, log *slog.Logger) string {
	for {
		ended := make(chan watchResult, 1)
		ctrl, via := a.control()
		go func() { ended <- s.watchRegistration(a, ctrl, log) }()
		var res watchResult
		watching := true
		select {
		case <-a.mux.CloseChan():
			res.reason = "the agent's connection closed"
		case <-s.closing:
			res.reason = "the workspace proxy is shutting down"
		case res = <-ended:
			watching = false
		}
		_ = ctrl.Close()
		if watching {
			<-ended // the watcher ends with the stream
			return res.reason
		}
		if !res.lost || !via.IsClosed() {
			// The primary ended the registration itself: the agent
			// reconnects (and is registered again if it may be).
			return res.reason
		}
		log.Warn("the agent's registration with the primary ended with the relay session; registering it again once the session is back (its connections through this proxy stay up)",
			"agent", s.agents.idOf(a))
		if err := s.reregisterAgent(ctx, a, log); err != nil {
			return err.Error()
		}
	}
}

// watchResult is why watchRegistration stopped; lost marks the OpAgent
// stream's end, after which the agent is registered again if the stream
// ended with its relay session.
type watchResult struct {
	reason string
	lost   bool
}

// registerAgent registers an agent with token, connected from remote, with
// the primary over relay session mux: an OpAgent stream. It returns the
// open stream and the agent's id, or the refusal to answer the agent with
// (the primary's status and message).
func (s *Server) registerAgent(ctx context.Context, mux *yamux.Session, token, remote string) (net.Conn, string, error) {
	ctrl, err := mux.OpenStream()
	if err != nil {
		return nil, "", apiError(http.StatusServiceUnavailable, "The relay session to the primary is closing; the agent retries", err.Error())
	}
	reply, err := request(ctx, ctrl, codersdk.ProxyRelayRequest{Op: codersdk.ProxyRelayOpAgent, AgentToken: token, Remote: remote}, dialWait)
	switch {
	case err != nil:
		err = apiError(http.StatusBadGateway, "The primary did not answer the agent's registration", err.Error())
	case reply.Status != 0:
		s.log.Info("agent connection refused by the primary", "status", reply.Status, "message", reply.Message, "remote", remote)
		err = apiError(reply.Status, reply.Message, "")
	case reply.AgentID == "":
		err = apiError(http.StatusBadGateway, "The primary accepted the agent without naming it", "")
	}
	if err != nil {
		_ = ctrl.Close()
		return nil, "", err
	}
	return ctrl, reply.AgentID, nil
}

// reregisterAgent registers agent a again once a relay session is up,
// retrying while the primary does not answer. It returns an error when the
// primary refuses the agent, or the agent's connection or the proxy stops
// first.
func (s *Server) reregisterAgent(ctx context.Context, a *agentConn, log *slog.Logger) error {
	wait := s.opts.RegisterRetry
	for {
		mux := s.waitSession(ctx, a.mux.CloseChan())
		if mux == nil {
			return errors.New("the agent's connection ended, or the proxy stopped, before the relay session was back")
		}
		ctrl, agentID, err := s.registerAgent(ctx, mux, a.token, a.remote)
		var apiErr *codersdk.Error
		switch {
		case err == nil:
		case errors.As(err, &apiErr) && apiErr.StatusCode >= 400 && apiErr.StatusCode < 500:
			return fmt.Errorf("the primary refused the agent's registration: %w", err)
		default:
			log.Debug("register the agent again", "err", err, "retry_in", wait)
			if !s.sleep(ctx, wait, "agentBackoff") {
				return ctx.Err()
			}
			wait = min(2*wait, 10*time.Second)
			continue
		}
		if !a.setControl(ctrl, mux) {
			return errors.New("the agent's connection closed")
		}
		if agentID != s.agents.idOf(a) && !s.moveAgent(a, agentID, log) {
			return errors.New("replaced by a newer connection of the agent")
		}
		log.Info("workspace agent registered again with the primary", "agent", agentID)
		return nil
	}
}

// waitSession returns the relay session once one is up, or nil when ctx
// ends, gone is closed or the proxy stops first.
func (s *Server) waitSession(ctx context.Context, gone <-chan struct{}) *yamux.Session {
	for {
		s.mu.Lock()
		mux, changed := s.mux, s.muxChanged
		s.mu.Unlock()
		if mux != nil && !mux.IsClosed() {
			return mux
		}
		select {
		case <-changed:
		case <-gone:
			return nil
		case <-s.closing:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// watchRegistration reads what the primary says later on a's OpAgent
// stream ctrl (a new agent id when a new build gave the token a new row,
// which re-keys a; a refusal) until the stream ends or a is displaced.
func (s *Server) watchRegistration(a *agentConn, ctrl net.Conn, log *slog.Logger) watchResult {
	for {
		var rep codersdk.ProxyRelayReply
		if err := relayconn.ReadFrame(ctrl, &rep); err != nil {
			return watchResult{reason: "the primary ended the agent's registration", lost: true}
		}
		if rep.Status != 0 {
			return watchResult{reason: fmt.Sprintf("the primary refused the agent (%d): %s", rep.Status, rep.Message)}
		}
		if rep.AgentID != "" && rep.AgentID != s.agents.idOf(a) {
			if !s.moveAgent(a, rep.AgentID, log) {
				return watchResult{reason: "replaced by a newer connection of the agent"}
			}
		}
	}
}

// moveAgent re-keys a under agentID (a new build's row of its token); it
// reports false when a newer connection of the agent replaced a.
func (s *Server) moveAgent(a *agentConn, agentID string, log *slog.Logger) bool {
	old, ok := s.agents.move(a, agentID)
	if !ok {
		return false
	}
	if old != nil && old != a {
		old.close()
	}
	log.Info("workspace agent moved to a new build", "new_agent", agentID)
	return true
}
