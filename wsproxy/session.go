package wsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/hashicorp/yamux"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// The relay session: one raw relay upgrade of
// GET {primary}/api/v2/workspaceproxies/me/relay?replica_id=… per proxy
// replica, authenticated with the proxy's token, carrying yamux (the
// primary the server, the proxy the client). The proxy opens OpAgent
// streams for the agents connected to it and OpDial streams for its users'
// connections to agents elsewhere; the primary opens OpDial streams to the
// agents connected here (codersdk/workspaceproxyrelay.go).
//
// The session is re-dialed with exponential backoff on Options.Clock
// (Options.RegisterRetry doubling up to 30 s) whenever it drops; while it
// is down /healthz answers 503 and the health report has an error, so
// clients use the primary. A refusal of the proxy's token (401, 403: the proxy was deleted) stops the
// proxy, as a refused heartbeat does.

// relaySessionPath is the primary's endpoint of the relay session.
const relaySessionPath = "/api/v2/workspaceproxies/me/relay"

// session is the relay session to the primary, or nil while it is down.
func (s *Server) session() *yamux.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mux != nil && s.mux.IsClosed() {
		return nil
	}
	return s.mux
}

// setSession records the relay session (nil: down) and wakes whoever
// waits for a change (waitSession).
func (s *Server) setSession(mux *yamux.Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mux = mux
	close(s.muxChanged)
	s.muxChanged = make(chan struct{})
}

// runRelaySession keeps the relay session up until ctx ends (nil) or the
// primary refuses the proxy (a *refusedError).
func (s *Server) runRelaySession(ctx context.Context) error {
	b := s.newBackoff()
	for {
		mux, err := s.dialRelaySession(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			var refused *refusedError
			if errors.As(err, &refused) {
				s.log.Error("the primary refused this workspace proxy's relay session; stopping", "err", err)
				return fmt.Errorf("relay session: %w", err)
			}
			next := b.NextBackOff()
			s.log.Warn("dial the relay session to the primary failed; retrying (clients use the primary meanwhile)",
				"primary", s.opts.PrimaryAccessURL.String(), "retry_in", next.Round(time.Millisecond), "err", err)
			if !s.sleep(ctx, next, "relayBackoff") {
				return nil
			}
			continue
		}
		b.Reset()
		began := s.clock.Now()
		s.setSession(mux)
		s.log.Info("relay session to the primary up", "primary", s.opts.PrimaryAccessURL.String())
		s.serveRelaySession(ctx, mux)
		s.setSession(nil)
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("relay session to the primary closed; re-dialing (agents connected here stay, and are registered again once it is back)", "lasted", s.clock.Since(began).Round(time.Millisecond))
	}
}

// dialRelaySession dials the relay session once. A refusal of the proxy's
// token (401, 403) is a *refusedError.
func (s *Server) dialRelaySession(ctx context.Context) (*yamux.Session, error) {
	u := s.opts.PrimaryAccessURL.JoinPath(relaySessionPath)
	u.RawQuery = url.Values{"replica_id": {s.replicaID}}.Encode()
	dctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	conn, err := relayconn.DialUpgrade(dctx, s.opts.HTTPClient, u, http.Header{codersdk.ExternalProxyAuthTokenHeader: {s.opts.ProxySessionToken}}, codersdk.ReadBodyAsError)
	if err != nil {
		var apiErr *codersdk.Error
		switch {
		case errors.As(err, &apiErr) && (apiErr.StatusCode == http.StatusUnauthorized || apiErr.StatusCode == http.StatusForbidden):
			return nil, &refusedError{err: err}
		case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound:
			return nil, fmt.Errorf("%w (the primary serves no relay sessions: is it older than this proxy? upgrade it)", err)
		}
		return nil, err
	}
	mux, err := yamux.Client(relayconn.CoalescedYamuxConn(conn), s.yamuxConfig())
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("start the relay session: %w", err)
	}
	return mux, nil
}

// serveRelaySession serves the streams the primary opens on mux until it
// closes or ctx ends, then closes mux. The agents registered over it lose
// their OpAgent streams and are registered again over the next session
// (agents.go).
func (s *Server) serveRelaySession(ctx context.Context, mux *yamux.Session) {
	stop := context.AfterFunc(ctx, func() { _ = mux.Close() })
	defer stop()
	for {
		stream, err := mux.AcceptStream()
		if err != nil {
			_ = mux.Close()
			return
		}
		if !s.track() {
			_ = stream.Close()
			continue
		}
		go func() {
			defer s.handlers.Done()
			s.servePrimaryStream(ctx, stream)
		}()
	}
}

// servePrimaryStream opens the connection the primary asks for on stream
// (OpDial to an agent connected here) and carries it.
func (s *Server) servePrimaryStream(ctx context.Context, stream net.Conn) {
	_ = stream.SetDeadline(time.Now().Add(dialWait))
	var req codersdk.ProxyRelayRequest
	if err := relayconn.ReadFrame(stream, &req); err != nil {
		s.log.Debug("read a relay request from the primary", "err", err)
		_ = stream.Close()
		return
	}
	reply := func(status int, message string) error {
		return relayconn.WriteFrame(stream, codersdk.ProxyRelayReply{Status: status, Message: message})
	}
	if req.Op != codersdk.ProxyRelayOpDial {
		_ = reply(http.StatusBadRequest, fmt.Sprintf("workspace proxies serve only %q streams from the primary, not %q", codersdk.ProxyRelayOpDial, req.Op))
		_ = stream.Close()
		return
	}
	log := s.log.With("conn", req.Header.ConnID, "agent", req.AgentID, "user", req.Header.User, "kind", req.Header.Kind, "via", "primary")
	a := s.agents.get(req.AgentID)
	if a == nil {
		_ = reply(http.StatusServiceUnavailable, "the agent is no longer connected to this workspace proxy; try again")
		_ = stream.Close()
		log.Info("relay connection from the primary refused: the agent is not connected here")
		return
	}
	agentConn, err := a.open(ctx, req.Header)
	if err != nil {
		// The agent's own refusal goes as its bare reason: the primary
		// words it as for an agent connected there.
		status, resp := statusOf(err)
		message := resp.Message
		var refused *agentRefusedError
		if errors.As(err, &refused) {
			message = refused.reason
		}
		_ = reply(status, message)
		_ = stream.Close()
		log.Info("relay connection from the primary refused", "err", err)
		return
	}
	if err := reply(0, ""); err != nil {
		_ = stream.Close()
		_ = agentConn.Close()
		return
	}
	_ = stream.SetDeadline(time.Time{})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.closeOnStop(cctx, stream)
	began := s.clock.Now()
	log.Info("relay connection from the primary opened")
	up, down := relayconn.Splice(stream, agentConn, relayconn.SpliceOptions{})
	log.Info("relay connection from the primary closed", "bytes_to_agent", up, "bytes_from_agent", down, "duration", s.clock.Since(began).Round(time.Millisecond))
}
