package codersdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// A prepared relay connection is authenticated, upgraded and bound to one
// agent, but connected to nothing yet: it waits for a RelayTarget frame,
// and coderd answers it with a RelayTargetReply before the bytes flow. A
// client that opens many short connections (coder port-forward) keeps one
// prepared ahead, so that a new connection costs only the target's dial and
// not a TCP handshake, an HTTP request and a token check (docs/relay.md,
// "Prepared connections").

// PreparedConnIdle is how long coderd keeps a prepared connection that has
// not been sent its target; clients replace theirs well before.
const PreparedConnIdle = 60 * time.Second

// RelayTarget is what a prepared connection connects to: the same choices
// as DialOptions.
type RelayTarget struct {
	Kind string `json:"kind"`
	Host string `json:"host,omitempty"`
	Port uint16 `json:"port,omitempty"`
}

// RelayTargetReply is coderd's answer to a RelayTarget: StatusCode 0 when
// the connection is made, else the HTTP status and error envelope the same
// request to /connect would have been answered with.
type RelayTargetReply struct {
	StatusCode int `json:"status_code,omitempty"`
	Response
}

// PreparedConn is a relay connection waiting for its target.
type PreparedConn struct {
	conn    net.Conn
	url     string
	created time.Time
}

// PrepareWorkspaceAgentConn opens a prepared relay connection to an agent.
// ctx bounds only the dial.
func (c *Client) PrepareWorkspaceAgentConn(ctx context.Context, agentID string) (*PreparedConn, error) {
	path := "/api/v2/workspaceagents/" + url.PathEscape(agentID) + "/connect?prepare=1"
	conn, err := c.dialRelay(ctx, path)
	if err != nil {
		return nil, err
	}
	return &PreparedConn{conn: conn, url: c.URL.String() + path, created: time.Now()}, nil
}

// Age is how long ago the connection was prepared.
func (p *PreparedConn) Age() time.Duration { return time.Since(p.created) }

// Close discards a connection that will not be used.
func (p *PreparedConn) Close() error { return p.conn.Close() }

// ErrPreparedConnLost marks a prepared connection that broke before it
// could be used (coderd restarted, or dropped it after PreparedConnIdle):
// prepare another.
var ErrPreparedConnLost = errors.New("the prepared relay connection was lost")

// Connect sends the connection its target and returns it connected. A
// refusal by coderd is an *Error as from DialWorkspaceAgent; a connection
// that broke while waiting wraps ErrPreparedConnLost. Either way the
// prepared connection is used up.
func (p *PreparedConn) Connect(ctx context.Context, opts DialOptions) (net.Conn, error) {
	if opts.Kind == "" {
		opts.Kind = RelayKindSSH
	}
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = p.conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = p.conn.SetDeadline(time.Now()) })
	defer stop()
	fail := func(err error) (net.Conn, error) {
		_ = p.conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %v", ErrPreparedConnLost, err)
	}
	if err := WriteRelayFrame(p.conn, RelayTarget{Kind: opts.Kind, Host: opts.Host, Port: opts.Port}); err != nil {
		return fail(err)
	}
	var reply RelayTargetReply
	if err := ReadRelayFrame(p.conn, &reply); err != nil {
		return fail(err)
	}
	if reply.StatusCode != 0 {
		_ = p.conn.Close()
		return nil, &Error{Response: reply.Response, StatusCode: reply.StatusCode, Method: http.MethodGet, URL: p.url}
	}
	if !stop() && ctx.Err() != nil {
		return fail(ctx.Err())
	}
	_ = p.conn.SetDeadline(time.Time{})
	return p.conn, nil
}
