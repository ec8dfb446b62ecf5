package wsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/yamux"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
	"airgapcoder/relaymux"
)

// The relay through a proxy (docs/wsproxy.md, "Relay"). Three kinds of
// connection meet here:
//
//   - agents of the region connect to the proxy (agents.go) as they would to
//     coderd; the proxy registers each with the primary over its relay
//     session (an OpAgent stream) and keeps its yamux session;
//   - users of the region connect through the proxy (connect.go); the proxy
//     asks the primary whether they may (cached for the answer's ValidFor)
//     and opens a stream to the agent: through its session here, or an
//     OpDial stream to the primary when the agent is elsewhere;
//   - the primary opens OpDial streams to agents connected here (session.go)
//     for users who reached the primary or another proxy.
//
// The agent API calls of agents connected here are forwarded to the
// primary unchanged (forward.go).

// relayRoutes mounts the relay: agents' connections, users' connections
// and the agent API calls forwarded to the primary.
func (s *Server) relayRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v2/workspaceagents/me/connect", s.agentConnect)
	mux.HandleFunc("GET /api/v2/workspaceagents/{agent}/connect", s.userConnect)
	s.forwardRoutes(mux)
}

// dialAgent opens a connection with header hdr (User set) to agent agentID:
// through its session here when the agent is connected to this proxy, else
// through the relay session to the primary. The returned connection is
// open: the agent accepted the header. A refusal is a *codersdk.Error with
// the status and message the user gets (502: the agent refused the target;
// 503: the agent or the primary cannot be reached now).
func (s *Server) dialAgent(ctx context.Context, agentID string, hdr codersdk.RelayHeader) (net.Conn, error) {
	if a := s.agents.get(agentID); a != nil {
		return a.open(ctx, hdr)
	}
	mux := s.session()
	if mux == nil {
		return nil, apiError(http.StatusServiceUnavailable, "This workspace proxy has no relay session to the primary now; try again in a moment or connect through the primary", "")
	}
	stream, err := mux.OpenStream()
	if err != nil {
		return nil, apiError(http.StatusServiceUnavailable, "The relay session to the primary is closing; try again in a moment", err.Error())
	}
	reply, err := request(ctx, stream, codersdk.ProxyRelayRequest{Op: codersdk.ProxyRelayOpDial, AgentID: agentID, Header: hdr}, dialWait)
	if err != nil {
		_ = stream.Close()
		return nil, apiError(http.StatusBadGateway, "The primary did not answer the connection request", err.Error())
	}
	if reply.Status != 0 {
		_ = stream.Close()
		return nil, apiError(reply.Status, reply.Message, "")
	}
	return stream, nil
}

// dialWait bounds a connection request's answer, from the primary or an
// agent (coderd waits 15 s for an agent; the primary may have to reach
// another replica first).
const dialWait = 20 * time.Second

// request writes req on stream and reads the ProxyRelayReply, within wait
// (or until ctx ends). On success the stream's deadline is cleared.
func request(ctx context.Context, stream net.Conn, req codersdk.ProxyRelayRequest, wait time.Duration) (codersdk.ProxyRelayReply, error) {
	var reply codersdk.ProxyRelayReply
	_ = stream.SetDeadline(time.Now().Add(wait))
	stop := context.AfterFunc(ctx, func() { _ = stream.SetDeadline(time.Now()) })
	defer stop()
	if err := relayconn.WriteFrame(stream, req); err != nil {
		return reply, fmt.Errorf("send the %s request: %w", req.Op, err)
	}
	if err := relayconn.ReadFrame(stream, &reply); err != nil {
		return reply, fmt.Errorf("read the answer to the %s request: %w", req.Op, err)
	}
	if ctx.Err() != nil {
		return reply, ctx.Err()
	}
	_ = stream.SetDeadline(time.Time{})
	return reply, nil
}

// apiError is an answer of the proxy's in the API's error envelope.
func apiError(status int, message, detail string) *codersdk.Error {
	return &codersdk.Error{StatusCode: status, Response: codersdk.Response{Message: message, Detail: detail}}
}

// statusOf is err's status and envelope for the user: a *codersdk.Error's
// own, else a 502 naming err.
func statusOf(err error) (int, codersdk.Response) {
	var ae *codersdk.Error
	if errors.As(err, &ae) && ae.StatusCode != 0 {
		return ae.StatusCode, ae.Response
	}
	var refused *agentRefusedError
	if errors.As(err, &refused) {
		return http.StatusBadGateway, codersdk.Response{Message: refused.Error()}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout, codersdk.Response{Message: "The connection request timed out", Detail: err.Error()}
	}
	return http.StatusBadGateway, codersdk.Response{Message: "The workspace proxy could not open the connection", Detail: err.Error()}
}

// writeError answers a request with err's status and envelope.
func writeError(w http.ResponseWriter, err error) {
	status, resp := statusOf(err)
	writeJSON(w, status, resp)
}

// acceptRelayConn takes over a relay request's connection, as coderd does:
// raw bytes after an upgrade to relayconn.Protocol (the CLI and agents), or
// a binary WebSocket (browsers, and clients behind a proxy that passes only
// WebSockets), which ctx ends.
func acceptRelayConn(ctx context.Context, w http.ResponseWriter, r *http.Request) (net.Conn, error) {
	if relayconn.IsUpgrade(r) {
		return relayconn.AcceptUpgrade(w)
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil, err // Accept has answered the client
	}
	return websocket.NetConn(ctx, ws, websocket.MessageBinary), nil
}

// acceptOrLog takes over a relay request's connection (acceptRelayConn).
// When it cannot (the client has had its answer), it closes opened, what
// the handler had opened for the connection (nil for nothing), logs
// "<what> not accepted" with args, and returns nil.
func (s *Server) acceptOrLog(ctx context.Context, w http.ResponseWriter, r *http.Request, opened net.Conn, what string, args ...any) net.Conn {
	nc, err := acceptRelayConn(ctx, w, r)
	if err != nil {
		if opened != nil {
			_ = opened.Close()
		}
		s.log.Info(what+" not accepted", append(args, "err", err)...)
		return nil
	}
	return nc
}

// yamuxConfig tunes the proxy's yamux sessions (to the primary and to
// agents) as coderd tunes its own: keepalive, an 8 MiB stream window.
func (s *Server) yamuxConfig() *yamux.Config {
	return relaymux.Config(s.log, s.opts.KeepAliveInterval)
}

// track counts a relay handler that outlives the HTTP server's knowledge
// of its connection (hijacked); Run waits for them after closing them. It
// reports false when the proxy is already stopping.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.handlers.Add(1)
	return true
}

// closeOnStop closes c when the proxy stops, unless ctx ends first.
func (s *Server) closeOnStop(ctx context.Context, c interface{ Close() error }) {
	go func() {
		select {
		case <-s.closing:
			_ = c.Close()
		case <-ctx.Done():
		}
	}()
}
