package codersdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/coder/websocket"

	"airgapcoder/relayconn"
)

// The client's relay connections (an agent's to coderd, a user's to an
// agent) are raw bytes after an HTTP/1.1 Upgrade to relayconn.Protocol,
// which package relayconn dials and carries (docs/relay.md, "Transport").
// A client whose upgrade is refused by something other than coderd (a
// proxy that only passes WebSockets) falls back to a WebSocket by itself.

// dialRelay opens a relay connection to path: a raw upgraded connection,
// or a WebSocket when something between the client and coderd refuses the
// upgrade. A refusal by coderd itself becomes an *Error with its message.
func (c *Client) dialRelay(ctx context.Context, path string) (net.Conn, error) {
	conn, err := c.dialUpgrade(ctx, path)
	if errors.Is(err, relayconn.ErrUpgradeNotPassed) {
		return c.dialWebSocket(ctx, path)
	}
	return conn, err
}

// dialUpgrade opens a raw relay connection to path; a refusal by coderd is
// an *Error, one by something else wraps relayconn.ErrUpgradeNotPassed.
func (c *Client) dialUpgrade(ctx context.Context, path string) (net.Conn, error) {
	u, err := c.URL.Parse(path)
	if err != nil {
		return nil, fmt.Errorf("parse path %q: %w", path, err)
	}
	h := http.Header{}
	if c.SessionToken != "" {
		h.Set(SessionTokenHeader, c.SessionToken)
	}
	return relayconn.DialUpgrade(ctx, c.httpClient(), u, h, ReadBodyAsError)
}

// dialWebSocket opens a binary WebSocket to path and adapts it to a
// net.Conn. A refused handshake becomes an *Error with coderd's message.
func (c *Client) dialWebSocket(ctx context.Context, path string) (net.Conn, error) {
	conn, err := c.openWebSocket(ctx, path)
	if err != nil {
		return nil, err
	}
	// The connection outlives ctx, as with net.Dialer.DialContext.
	return websocket.NetConn(context.Background(), conn, websocket.MessageBinary), nil
}
