package relayconn

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Relay connections (an agent's to coderd, a user's to an agent) carry raw
// bytes after an HTTP/1.1 Upgrade to Protocol: no WebSocket framing,
// masking or per-message flush, so a bulk transfer costs one write per
// chunk on each hop (docs/relay.md, "Transport"). Browsers cannot make such
// a request; they use WebSockets (the web terminal), which coderd still
// accepts on the same paths. A client whose upgrade is refused by something
// other than coderd (a proxy that only passes WebSockets) falls back to a
// WebSocket by itself (codersdk's dialer).

// Protocol is the Upgrade token of a raw relay connection.
const Protocol = "coder-relay/1"

// IsUpgrade reports whether r asks for a raw relay connection.
func IsUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && strings.EqualFold(r.Header.Get("Upgrade"), Protocol)
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// ErrUpgradeNotPassed marks a refused upgrade that was not coderd's answer
// (a proxy between that passes only WebSockets, say).
var ErrUpgradeNotPassed = errors.New("the upgrade to " + Protocol + " did not reach coderd")

// DialUpgrade opens a raw relay connection to u (see Protocol) with
// client's transport and header. A response that is not 101 is refused's
// error when coderd sent it (JSON) and refused is set (codersdk passes
// ReadBodyAsError, which makes its *Error), else an error wrapping
// ErrUpgradeNotPassed. refused owns the response: it closes the body.
func DialUpgrade(ctx context.Context, client *http.Client, u *url.URL, header http.Header, refused func(*http.Response) error) (net.Conn, error) {
	base, ok := client.Transport.(*http.Transport)
	if client.Transport == nil {
		base, ok = http.DefaultTransport.(*http.Transport)
	}
	if !ok {
		return nil, ErrUpgradeNotPassed // a custom transport: let the WebSocket library use it
	}
	// One transport per connection, HTTP/1.1 only (HTTP/2 has no
	// Upgrade), whose dialer remembers the TCP connection so that the
	// returned conn has real addresses and deadlines.
	tr := base.Clone()
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	if tr.TLSClientConfig != nil {
		// A TLS configuration that offers h2 (as a trust store's may)
		// would let the server pick HTTP/2, which this transport does not
		// speak.
		tr.TLSClientConfig = tr.TLSClientConfig.Clone()
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	var raw net.Conn
	var batcher *recordBatcher // under the TLS connection (tlsbatch.go)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		raw = conn
		if u.Scheme == "https" {
			batcher = &recordBatcher{Conn: conn}
			return batcher, nil
		}
		return conn, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", Protocol)
	c := *client
	c.Transport = tr
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("dial %s: %w", u.Redacted(), err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer tr.CloseIdleConnections()
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" && refused != nil {
			return nil, refused(resp)
		}
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%w (%s)", ErrUpgradeNotPassed, resp.Status)
	}
	body, ok := resp.Body.(io.ReadWriteCloser)
	if !ok || raw == nil || !strings.EqualFold(resp.Header.Get("Upgrade"), Protocol) {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("dial %s: the server switched to %q, not %s", u.Redacted(), resp.Header.Get("Upgrade"), Protocol)
	}
	var r io.Reader = body
	if u.Scheme == "https" {
		r = fillReads(body, raw)
	}
	return &upgradedConn{ReadWriteCloser: body, raw: raw, r: r, b: batcher}, nil
}

// upgradedConn is an upgraded HTTP connection, dialed (its bytes go
// through the transport's reader, which may hold bytes read past the
// response, and writer) or accepted over TLS (AcceptUpgrade); addresses
// and deadlines are raw's (a TLS connection's deadlines are its TCP
// connection's). Over TLS its reads take what the socket already holds
// (fillReads: one read of the body returns one record), and each write
// sends its records in one syscall when b is set (tlsbatch.go).
type upgradedConn struct {
	io.ReadWriteCloser
	raw net.Conn
	r   io.Reader
	b   *recordBatcher
}

func (c *upgradedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *upgradedConn) Write(p []byte) (int, error) {
	return batchedWrite(c.b, c.ReadWriteCloser.Write, p)
}

func (c *upgradedConn) LocalAddr() net.Addr                { return c.raw.LocalAddr() }
func (c *upgradedConn) RemoteAddr() net.Addr               { return c.raw.RemoteAddr() }
func (c *upgradedConn) SetDeadline(t time.Time) error      { return c.raw.SetDeadline(t) }
func (c *upgradedConn) SetReadDeadline(t time.Time) error  { return c.raw.SetReadDeadline(t) }
func (c *upgradedConn) SetWriteDeadline(t time.Time) error { return c.raw.SetWriteDeadline(t) }

// AcceptUpgrade answers a request for a raw relay connection (see
// IsUpgrade) with 101 Switching Protocols and returns the connection.
func AcceptUpgrade(w http.ResponseWriter) (net.Conn, error) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, fmt.Errorf("take over the connection: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + Protocol + "\r\n\r\n"); err == nil {
		err = brw.Flush()
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("switch protocols: %w", err)
	}
	nc := conn
	if brw.Reader.Buffered() > 0 {
		nc = &bufferedConn{Conn: conn, r: brw.Reader}
	}
	if tc, ok := conn.(*tls.Conn); ok {
		// Read and written as dialed relay connections are.
		b, _ := tc.NetConn().(*recordBatcher) // see BatchingListener
		return &upgradedConn{ReadWriteCloser: nc, raw: nc, r: fillReads(nc, tc.NetConn()), b: b}, nil
	}
	return nc, nil
}

// bufferedConn reads what the server's reader already holds first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
