package codersdk

import (
	"context"
	"time"
)

// The relay between a workspace proxy and the primary (docs/wsproxy.md,
// "Protocol"). A proxy keeps one relay session to the primary: a raw relay
// upgrade (relayconn.Protocol) of
//
//	GET /api/v2/workspaceproxies/me/relay?replica_id=<the proxy's replica id>
//
// authenticated with the proxy's token (ExternalProxyAuthTokenHeader). The
// primary runs the yamux server on it, the proxy the yamux client; both
// open streams. Every stream begins with a ProxyRelayRequest frame
// (relayconn.WriteFrame) and is answered with a ProxyRelayReply frame; a
// "dial" stream then carries the connection's bytes, raw, both ways.
//
// Streams the proxy opens:
//   - OpAgent: an agent connected to the proxy. AgentToken is its token;
//     the primary answers its agent id (or a refusal: Status 401), marks it
//     connected on the replica that holds the session, and keeps it
//     connected (liveness) for as long as the stream stays open. When a new
//     build gives the token a new agent row, the primary writes another
//     ProxyRelayReply with the new AgentID on the stream. The proxy closes
//     the stream when the agent's connection ends.
//   - OpDial: a user's connection, which the proxy already authorized
//     (AuthorizeConnect), to an agent that is not connected to this proxy.
//     The primary opens the stream to the agent wherever it is (a replica,
//     another proxy) with Header, and answers 0 or the refusal.
//
// Streams the primary opens:
//   - OpDial: a connection to an agent connected to this proxy (AgentID,
//     Header as the agent gets it). The proxy opens the stream to the agent,
//     writes Header, waits for the agent's RelayReply and answers 0, or 502
//     with the agent's error, or 503 when the agent is not connected here.

// Operations of a proxy relay stream.
const (
	ProxyRelayOpAgent = "agent"
	ProxyRelayOpDial  = "dial"
)

// ProxyRelayRequest opens a stream on a proxy's relay session.
type ProxyRelayRequest struct {
	Op string `json:"op"`
	// AgentID is the agent an OpDial stream goes to.
	AgentID string `json:"agent_id,omitempty"`
	// Header is the stream header the agent gets (OpDial); User is set.
	Header RelayHeader `json:"header,omitempty"`
	// AgentToken authenticates the agent of an OpAgent stream.
	AgentToken string `json:"agent_token,omitempty"`
	// Remote is the address the agent or user connected to the proxy from
	// (logs and audit).
	Remote string `json:"remote,omitempty"`
}

// ProxyRelayReply answers a ProxyRelayRequest: Status 0 means done (the
// stream is open, or the agent is registered); else an HTTP status and
// the message to show.
type ProxyRelayReply struct {
	Status  int    `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	// AgentID is the agent an OpAgent stream's token belongs to (again on
	// the same stream when a new build moved the token to a new agent).
	AgentID string `json:"agent_id,omitempty"`
}

// ProxyAuthorizeConnectRequest asks the primary whether the session token
// a user gave a proxy may open a connection to an agent:
// POST /api/v2/workspaceproxies/me/authorize-connect.
type ProxyAuthorizeConnectRequest struct {
	SessionToken string `json:"session_token"`
	AgentID      string `json:"agent_id"`
	// Kind, Host and Port are the connection's (RelayKind*).
	Kind   string `json:"kind"`
	Host   string `json:"host,omitempty"`
	Port   uint16 `json:"port,omitempty"`
	Remote string `json:"remote,omitempty"`
}

// ProxyAuthorizeConnectResponse is the primary's yes (200); a no is an
// error answer (401, 403, 404, 409, 503) with the message the user sees,
// the same as the primary's own connect endpoint gives.
type ProxyAuthorizeConnectResponse struct {
	UserID        string `json:"user_id"`
	Username      string `json:"username"`
	AgentID       string `json:"agent_id"`
	AgentName     string `json:"agent_name"`
	WorkspaceID   string `json:"workspace_id"`
	WorkspaceName string `json:"workspace_name"`
	OwnerName     string `json:"owner_name"`
	// ValidForMillis is how long the proxy may reuse this answer for the
	// same token and agent without asking again: the bound within which a
	// revoked token or a removed permission stops working at the proxy.
	ValidForMillis int64 `json:"valid_for_ms"`
}

// ValidFor is ValidForMillis as a duration.
func (r ProxyAuthorizeConnectResponse) ValidFor() time.Duration {
	return time.Duration(r.ValidForMillis) * time.Millisecond
}

// ProxyConnectionReport is a proxy's record of a relayed user connection
// that ended: POST /api/v2/workspaceproxies/me/connections (204). The
// primary writes the audit record (action connect, the agent as resource)
// with the proxy's name.
type ProxyConnectionReport struct {
	UserID    string    `json:"user_id"`
	AgentID   string    `json:"agent_id"`
	ConnID    string    `json:"conn_id"`
	Kind      string    `json:"kind"`
	Host      string    `json:"host,omitempty"`
	Port      uint16    `json:"port,omitempty"`
	Remote    string    `json:"remote,omitempty"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	BytesUp   int64     `json:"bytes_up"`
	BytesDown int64     `json:"bytes_down"`
	// Error is the refusal when the connection never opened (the agent
	// refused the port); "" for a connection that carried bytes.
	Error string `json:"error,omitempty"`
}

// AuthorizeConnect asks the primary about a user's connection.
func (c *ProxyClient) AuthorizeConnect(ctx context.Context, req ProxyAuthorizeConnectRequest) (ProxyAuthorizeConnectResponse, error) {
	var out ProxyAuthorizeConnectResponse
	return out, c.call(ctx, "/api/v2/workspaceproxies/me/authorize-connect", req, &out, 200)
}

// ReportConnection sends the record of a relayed connection.
func (c *ProxyClient) ReportConnection(ctx context.Context, req ProxyConnectionReport) error {
	return c.call(ctx, "/api/v2/workspaceproxies/me/connections", req, nil, 204)
}
