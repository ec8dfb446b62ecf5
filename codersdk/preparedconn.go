package codersdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"airgapcoder/relayconn"
)

// A prepared relay connection is authenticated, upgraded and bound to one
// agent, but connected to nothing yet: it waits for a RelayTarget frame,
// and coderd answers it with a RelayTargetReply before the agent's bytes
// flow. A client that opens many short connections (coder port-forward)
// keeps one prepared ahead, so that a new connection costs only the
// target's dial and not a TCP handshake, an HTTP request and a token check
// (docs/relay.md, "Prepared connections").
//
// The client's bytes need not wait for the reply: written after the
// target, they travel behind it, and coderd forwards them once the target
// is connected or drops them with its refusal (Start).

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
	// reply is coderd's one frame, read from the moment the connection is
	// prepared: a connection coderd dropped while it waited (a restart,
	// its idle limit) is known lost before anything is sent on it.
	reply chan replyOrErr
}

type replyOrErr struct {
	reply RelayTargetReply
	err   error
}

// PrepareWorkspaceAgentConn opens a prepared relay connection to an agent.
// ctx bounds only the dial.
func (c *Client) PrepareWorkspaceAgentConn(ctx context.Context, agentID string) (*PreparedConn, error) {
	path := "/api/v2/workspaceagents/" + url.PathEscape(agentID) + "/connect?prepare=1"
	conn, err := c.dialRelay(ctx, path)
	if err != nil {
		return nil, err
	}
	p := &PreparedConn{conn: conn, url: c.URL.String() + path, created: time.Now(), reply: make(chan replyOrErr, 1)}
	go func() {
		var r RelayTargetReply
		err := relayconn.ReadFrame(conn, &r)
		p.reply <- replyOrErr{r, err}
	}()
	return p, nil
}

// Age is how long ago the connection was prepared.
func (p *PreparedConn) Age() time.Duration { return time.Since(p.created) }

// Close discards a connection that will not be used.
func (p *PreparedConn) Close() error { return p.conn.Close() }

// ErrPreparedConnLost marks a prepared connection that broke before it
// could be used (coderd restarted, or dropped it after PreparedConnIdle):
// prepare another.
var ErrPreparedConnLost = errors.New("the prepared relay connection was lost")

// Start sends the connection its target and returns it without waiting
// for coderd's answer: what the caller writes goes out at once behind the
// target. Its first Read waits for the answer and returns a refusal as an
// *Error (Answer returns the same), after which coderd has forwarded none
// of the bytes written. A connection already known lost is closed and
// reported with ErrPreparedConnLost, nothing sent. Either way the prepared
// connection is used up.
func (p *PreparedConn) Start(opts DialOptions) (*StartedConn, error) {
	select {
	case r := <-p.reply:
		_ = p.conn.Close()
		err := r.err
		if err == nil {
			err = fmt.Errorf("coderd answered before the target was sent (status %d)", r.reply.StatusCode)
		}
		return nil, fmt.Errorf("%w: %v", ErrPreparedConnLost, err)
	default:
	}
	if opts.Kind == "" {
		opts.Kind = RelayKindSSH
	}
	// coderd answers within its dial timeout; one that does not is gone.
	_ = p.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := relayconn.WriteFrame(p.conn, RelayTarget{Kind: opts.Kind, Host: opts.Host, Port: opts.Port}); err != nil {
		_ = p.conn.Close()
		return nil, fmt.Errorf("%w: %v", ErrPreparedConnLost, err)
	}
	_ = p.conn.SetWriteDeadline(time.Time{})
	return &StartedConn{Conn: p.conn, p: p}, nil
}

// Connect sends the connection its target and returns it connected. A
// refusal by coderd is an *Error as from DialWorkspaceAgent; a connection
// that broke before coderd answered wraps ErrPreparedConnLost. Either way
// the prepared connection is used up.
func (p *PreparedConn) Connect(ctx context.Context, opts DialOptions) (net.Conn, error) {
	c, err := p.Start(opts)
	if err != nil {
		return nil, err
	}
	if err := c.Answer(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// StartedConn is a prepared connection that was sent its target: a
// net.Conn whose reads begin after coderd's answer.
type StartedConn struct {
	net.Conn
	p *PreparedConn

	once sync.Once
	err  error
}

// Answer waits for coderd's answer to the target: nil when the connection
// is made, an *Error when coderd refused it, an error wrapping
// ErrPreparedConnLost when the connection broke first. ctx ends the wait
// (and the connection). The answer is kept: later calls return it at once.
func (c *StartedConn) Answer(ctx context.Context) error {
	c.once.Do(func() {
		stop := context.AfterFunc(ctx, func() { _ = c.Conn.SetReadDeadline(time.Now()) })
		r := <-c.p.reply
		if !stop() && ctx.Err() != nil {
			c.err = ctx.Err()
			return
		}
		switch {
		case r.err != nil:
			c.err = fmt.Errorf("%w: %v", ErrPreparedConnLost, r.err)
		case r.reply.StatusCode != 0:
			c.err = &Error{Response: r.reply.Response, StatusCode: r.reply.StatusCode, Method: http.MethodGet, URL: c.p.url}
		default:
			_ = c.Conn.SetReadDeadline(time.Time{})
		}
	})
	return c.err
}

// Read waits for coderd's answer once, then reads the relayed bytes.
func (c *StartedConn) Read(b []byte) (int, error) {
	if err := c.Answer(context.Background()); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}
