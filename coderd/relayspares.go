package coderd

import (
	"net"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// Spare agent connections. Besides its yamux session, an agent keeps
// codersdk.AgentSpareConns relay connections of its own dialed ahead (GET
// /api/v2/workspaceagents/me/connect?spare=1), each waiting, idle, for the
// header of one user connection. A new ssh or tcp connection takes one
// when there is one: coderd writes the header on it, the agent answers as
// on a stream, and from then on the connection carries the user's bytes as
// they are, alone on its socket: no stream to open, no frames, no flow
// control window, no hand-off to a send loop on either side, and a plain
// copy from socket to socket in coderd. The agent dials another once it has
// answered. When none is waiting (a burst took them, or the agent cannot
// reach this replica that way) the connection is a stream of the session,
// as before; web terminals always are (their relay watches the session).
// See docs/relay.md, Spare connections.

// maxSpares bounds the spare connections coderd keeps for one agent
// session: twice what an agent dials, so that a spare the agent dialed
// again while coderd had not yet seen the old one close is not refused.
const maxSpares = 2 * codersdk.AgentSpareConns

// spares are one agent session's spare connections.
type spares struct {
	mu     sync.Mutex
	conns  []net.Conn // oldest first
	closed bool
}

// add keeps c for a later user connection. It reports false, keeping
// nothing, when the session has ended or holds maxSpares live ones.
func (s *spares) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if len(s.conns) >= maxSpares {
		s.conns = pruneClosed(s.conns)
		if len(s.conns) >= maxSpares {
			return false
		}
	}
	s.conns = append(s.conns, c)
	return true
}

// take returns the newest spare connection the agent has not closed, or
// nil. The closed ones it meets are thrown away.
func (s *spares) take() net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := len(s.conns); n > 0; n-- {
		c := s.conns[n-1]
		s.conns = s.conns[:n-1]
		if relayconn.Quiet(c) {
			return c
		}
		_ = c.Close()
	}
	return nil
}

// pruneClosed closes and drops the connections that are no longer quiet.
func pruneClosed(conns []net.Conn) []net.Conn {
	live := conns[:0]
	for _, c := range conns {
		if relayconn.Quiet(c) {
			live = append(live, c)
		} else {
			_ = c.Close()
		}
	}
	clear(conns[len(live):])
	return live
}

// close closes every spare connection and keeps none from now on: the
// session ended.
func (s *spares) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

// ctxSpareSession holds the agent session a spare connection's request
// was authenticated by (spareBySession).
const ctxSpareSession = "coderd.spareSession"

// spareBySession authenticates a spare connection's request (GET
// /api/v2/workspaceagents/me/connect?spare=1) by its agent's session on
// this replica, which the same token opened: a spare then costs no
// database query (an agent's connect would otherwise look its token up
// three times, once per connection). It reports false, leaving the request
// to requireAgent's lookup of the token, for any other request and when no
// session on this replica has the token (agentSpare then refuses).
func (api *API) spareBySession(c *gin.Context, token string) bool {
	if c.Query("spare") == "" || c.FullPath() != "/api/v2/workspaceagents/me/connect" {
		return false
	}
	s := api.relay.withToken(token)
	if s == nil {
		return false
	}
	c.Set(ctxSpareSession, s)
	return true
}

// agentSpare serves GET /workspaceagents/me/connect?spare=1: it keeps the
// agent's raw relay connection as a spare of the agent's session on this
// replica. A replica the session is not on refuses (409), and so does one
// that holds enough spares for it.
func (api *API) agentSpare(c *gin.Context) error {
	var s *agentSession
	if v, ok := c.Get(ctxSpareSession); ok {
		s = v.(*agentSession)
	} else {
		a := agentFrom(c)
		if s = api.relay.get(a.ID); s == nil {
			return errorf(http.StatusConflict, "", "Agent %s has no relay session on this coderd replica: a spare connection must reach the replica its session is on", a.ID)
		}
	}
	if !relayconn.IsUpgrade(c.Request) {
		return errorf(http.StatusBadRequest, "", "A spare connection must upgrade to %s", relayconn.Protocol)
	}
	nc, err := relayconn.AcceptUpgrade(c.Writer)
	if err != nil {
		api.log.Info("spare agent connection not accepted", "agent", api.relay.idOf(s), "err", err)
		return nil
	}
	if !s.spares.add(nc) {
		_ = nc.Close()
	}
	return nil
}

// openAgentConn opens a connection to the agent of session s for hdr: a
// spare when one waits and hdr is not a web terminal's, else a new stream
// of the session.
func (api *API) openAgentConn(s *agentSession, hdr codersdk.RelayHeader) (net.Conn, error) {
	if hdr.Kind != codersdk.RelayKindPTY {
		if c := s.spares.take(); c != nil {
			api.metrics.relayConns.WithLabelValues("spare").Inc()
			return c, nil
		}
	}
	stream, err := s.mux.Open()
	if err != nil {
		return nil, err
	}
	api.metrics.relayConns.WithLabelValues("stream").Inc()
	return stream, nil
}
