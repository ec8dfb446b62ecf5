package codersdk

import (
	"context"
	"net/url"
	"strconv"

	"github.com/coder/websocket"
)

// The web terminal: a reconnecting PTY. A browser opens
//
//	GET /api/v2/workspaceagents/{agent}/pty?reconnect={uuid}&width={cols}&height={rows}[&command={cmd}]
//
// a WebSocket on which coderd sends the terminal's output as binary
// messages and the browser sends ReconnectingPTYRequest JSON objects as
// text messages. The agent keeps the PTY and its process for a while when
// no client is attached; connecting again with the same reconnect id
// replays the output kept since (the last 64 KiB) and then streams live
// output. A normal closure (1000) means the process exited; any other end
// of the WebSocket leaves the session to the agent's timeout.
//
// Between coderd and the agent the stream starts with a RelayHeader of kind
// RelayKindPTY; after the agent's RelayReply, the agent sends raw output
// bytes and coderd sends ReconnectingPTYRequest values, each framed as with
// relayconn.WriteFrame. See docs/relay.md.

// RelayPTY is the terminal a RelayKindPTY stream attaches to.
type RelayPTY struct {
	// Reconnect identifies the session: a stream with the id of a live
	// session attaches to it, any other starts a new one. Required.
	Reconnect string `json:"reconnect"`
	// Width and Height are the terminal's size in columns and rows; zero
	// leaves it as it is (80x24 for a new session).
	Width  uint16 `json:"width,omitempty"`
	Height uint16 `json:"height,omitempty"`
	// Command is what a new session runs with the user's login shell (sh
	// -c); empty runs the login shell itself. An existing session ignores
	// it.
	Command string `json:"command,omitempty"`
}

// ReconnectingPTYRequest is what a web terminal client sends: keys typed
// or pasted, and resizes. Either part may be absent.
type ReconnectingPTYRequest struct {
	// Data is written to the terminal as it is.
	Data string `json:"data,omitempty"`
	// Height and Width resize the terminal when both are non-zero.
	Height uint16 `json:"height,omitempty"`
	Width  uint16 `json:"width,omitempty"`
}

// ReconnectingPTYOptions say which web terminal session
// WorkspaceAgentReconnectingPTY attaches to.
type ReconnectingPTYOptions struct {
	// Reconnect is the session's id, a UUID. Required.
	Reconnect string
	// Width and Height are the terminal's size (zero: 80x24).
	Width, Height uint16
	// Command is what a new session runs (empty: the login shell).
	Command string
}

// WorkspaceAgentReconnectingPTY opens the web terminal WebSocket of an
// agent, as a browser does. The caller reads binary output messages and
// writes ReconnectingPTYRequest JSON as text messages. ctx bounds only the
// handshake. A refused handshake is an *Error with coderd's message.
func (c *Client) WorkspaceAgentReconnectingPTY(ctx context.Context, agentID string, opts ReconnectingPTYOptions) (*websocket.Conn, error) {
	q := url.Values{"reconnect": {opts.Reconnect}}
	if opts.Width > 0 {
		q.Set("width", strconv.Itoa(int(opts.Width)))
	}
	if opts.Height > 0 {
		q.Set("height", strconv.Itoa(int(opts.Height)))
	}
	if opts.Command != "" {
		q.Set("command", opts.Command)
	}
	return c.openWebSocket(ctx, "/api/v2/workspaceagents/"+url.PathEscape(agentID)+"/pty?"+q.Encode())
}
