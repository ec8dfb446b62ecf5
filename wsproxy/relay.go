package wsproxy

import (
	"context"
	"errors"
	"net"
	"net/http"

	"airgapcoder/codersdk"
)

// relayRoutes mounts the relay: agents' connections, users' connections
// and the agent API calls forwarded to the primary.
func (s *Server) relayRoutes(mux *http.ServeMux) {}

// dialAgent opens a connection with header hdr (User set) to agent agentID:
// through its session here when the agent is connected to this proxy, else
// through the relay session to the primary. The returned connection is
// open: the agent accepted the header.
func (s *Server) dialAgent(ctx context.Context, agentID string, hdr codersdk.RelayHeader) (net.Conn, error) {
	return nil, errors.New("not yet")
}
