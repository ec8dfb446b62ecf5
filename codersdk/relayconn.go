package codersdk

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Relay connections (an agent's to coderd, a user's to an agent) carry raw
// bytes after an HTTP/1.1 Upgrade to RelayProtocol: no WebSocket framing,
// masking or per-message flush, so a bulk transfer costs one write per
// chunk on each hop (docs/relay.md, "Transport"). Browsers cannot make such
// a request; they use WebSockets (the web terminal), which coderd still
// accepts on the same paths. A client whose upgrade is refused by something
// other than coderd (a proxy that only passes WebSockets) falls back to a
// WebSocket by itself.

// RelayProtocol is the Upgrade token of a raw relay connection.
const RelayProtocol = "coder-relay/1"

// IsRelayUpgrade reports whether r asks for a raw relay connection.
func IsRelayUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && strings.EqualFold(r.Header.Get("Upgrade"), RelayProtocol)
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

// dialRelay opens a relay connection to path: a raw upgraded connection,
// or a WebSocket when something between the client and coderd refuses the
// upgrade. A refusal by coderd itself becomes an *Error with its message.
func (c *Client) dialRelay(ctx context.Context, path string) (net.Conn, error) {
	conn, err := c.dialUpgrade(ctx, path)
	if errors.Is(err, ErrUpgradeNotPassed) {
		return c.dialWebSocket(ctx, path)
	}
	return conn, err
}

// ErrUpgradeNotPassed marks a refused upgrade that was not coderd's answer
// (a proxy between that passes only WebSockets, say).
var ErrUpgradeNotPassed = errors.New("the upgrade to " + RelayProtocol + " did not reach coderd")

func (c *Client) dialUpgrade(ctx context.Context, path string) (net.Conn, error) {
	u, err := c.URL.Parse(path)
	if err != nil {
		return nil, fmt.Errorf("parse path %q: %w", path, err)
	}
	h := http.Header{}
	if c.SessionToken != "" {
		h.Set(SessionTokenHeader, c.SessionToken)
	}
	return DialRelayUpgrade(ctx, c.httpClient(), u, h)
}

// DialRelayUpgrade opens a raw relay connection to u (see RelayProtocol)
// with client's transport and header. A response that is not 101 is an
// *Error when coderd sent it (JSON), else an error wrapping
// ErrUpgradeNotPassed.
func DialRelayUpgrade(ctx context.Context, client *http.Client, u *url.URL, header http.Header) (net.Conn, error) {
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
	req.Header.Set("Upgrade", RelayProtocol)
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
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
			return nil, ReadBodyAsError(resp)
		}
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%w (%s)", ErrUpgradeNotPassed, resp.Status)
	}
	body, ok := resp.Body.(io.ReadWriteCloser)
	if !ok || raw == nil || !strings.EqualFold(resp.Header.Get("Upgrade"), RelayProtocol) {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("dial %s: the server switched to %q, not %s", u.Redacted(), resp.Header.Get("Upgrade"), RelayProtocol)
	}
	var r io.Reader = body
	if u.Scheme == "https" {
		r = fillReads(body, raw)
	}
	return &upgradedConn{ReadWriteCloser: body, raw: raw, r: r, b: batcher}, nil
}

// upgradedConn is an upgraded HTTP connection, dialed (its bytes go
// through the transport's reader, which may hold bytes read past the
// response, and writer) or accepted over TLS (AcceptRelayUpgrade);
// addresses and deadlines are raw's (a TLS connection's deadlines are its
// TCP connection's). Over TLS its reads take what the socket already holds
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

// AcceptRelayUpgrade answers a request for a raw relay connection (see
// IsRelayUpgrade) with 101 Switching Protocols and returns the connection.
func AcceptRelayUpgrade(w http.ResponseWriter) (net.Conn, error) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, fmt.Errorf("take over the connection: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + RelayProtocol + "\r\n\r\n"); err == nil {
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
		// Read and written as the SDK's own relay connections are.
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

// RelayStreamWindow is the yamux stream window both ends of a relay
// session use: large enough that a bulk transfer does not wait for window
// updates on loopback-fast links (docs/relay.md, Transport).
const RelayStreamWindow = 8 << 20

// yamuxHeaderSize is the size of a yamux frame header: version, type,
// flags, stream id and length.
const yamuxHeaderSize = 12

// CoalescedYamuxConn wraps the connection a yamux session runs on so that
// each data frame's header and body, which yamux writes with two calls,
// leave in one write: one syscall (and one TLS record, or one WebSocket
// message) per frame instead of two.
func CoalescedYamuxConn(conn io.ReadWriteCloser) io.ReadWriteCloser {
	return &coalescingConn{ReadWriteCloser: conn}
}

type coalescingConn struct {
	io.ReadWriteCloser
	mu      sync.Mutex
	pending []byte // a data frame's header, waiting for its body
	buf     []byte
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		// A data frame (type 0) with a body to come: hold its header.
		if len(p) == yamuxHeaderSize && p[1] == 0 && binary.BigEndian.Uint32(p[8:12]) > 0 {
			c.pending = append(c.buf[:0], p...)
			return len(p), nil
		}
		return c.ReadWriteCloser.Write(p)
	}
	frame := append(c.pending, p...)
	c.pending = nil
	n, err := c.ReadWriteCloser.Write(frame)
	c.buf = frame[:0]
	if n -= yamuxHeaderSize; n < 0 {
		n = 0
	}
	return n, err
}

// copyBufs are relay copy buffers: large, so that a bulk transfer crosses
// each hop in few writes. A copy reads with one of idleBufs until a read
// fills it: an idle or interactive connection (a shell, an HTTP connection
// kept alive) holds 8 KiB while it waits, not 256.
var (
	copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}
	idleBufs = sync.Pool{New: func() any { b := make([]byte, idleBufSize); return &b }}
)

const (
	copyBufSize = 256 << 10
	idleBufSize = 8 << 10
)

// CopyBuffered copies src to dst, reading with a pooled 8 KiB buffer until a
// read fills it and with a 256 KiB one from then on. It does not use
// ReaderFrom or WriterTo: a TCP connection's, when the other side is not a
// socket it can splice to, copies 32 KiB at a time. It returns when src ends
// (nil error at EOF) or a write fails.
func CopyBuffered(dst io.Writer, src io.Reader) (int64, error) {
	written, bulk, err := copyIdle(dst, src)
	if !bulk {
		return written, err
	}
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	n, _, err := copyWith(dst, src, *buf, false)
	return written + n, err
}

// copyIdle copies src to dst with a pooled 8 KiB buffer, each read written
// at once on the caller's goroutine, until the copy ends or a read fills
// the buffer: then bulk is set, and the caller goes on with larger ones.
func copyIdle(dst io.Writer, src io.Reader) (written int64, bulk bool, err error) {
	buf := idleBufs.Get().(*[]byte)
	defer idleBufs.Put(buf)
	return copyWith(dst, src, *buf, true)
}

// copyWith copies src to dst through buf until src ends (nil error at
// EOF) or a write fails, or, when untilFull is set, until a read fills buf
// (full is then set).
func copyWith(dst io.Writer, src io.Reader, buf []byte, untilFull bool) (written int64, full bool, err error) {
	for {
		n, rerr := src.Read(buf)
		w, err := writeFull(dst, buf[:n])
		written += int64(w)
		if err != nil {
			return written, false, err
		}
		if rerr != nil {
			return written, false, endOf(rerr)
		}
		if untilFull && n == len(buf) {
			return written, true, nil
		}
	}
}

// writeFull writes p to dst; a short write is an error.
func writeFull(dst io.Writer, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := dst.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return n, err
}

// endOf is a copy's result for the read error that ended it: nil at EOF.
func endOf(err error) error {
	if err == io.EOF {
		return nil
	}
	return err
}

// CopyPipelined copies src to dst like CopyBuffered, but once a read fills
// the small buffer (a bulk transfer, not an interactive one), it reads the
// next chunk while the one before is being written: two 256 KiB buffers,
// and a goroutine that reads into one while the caller's writes the other.
// A hop whose reads and writes both cost (coderd reading a user's TLS
// connection and writing to an agent's) then uses two cores instead of one
// in turn. Until then it reads and writes on the caller's goroutine, as
// CopyBuffered does: the first bytes of a connection, and every keystroke,
// go out without waiting for another goroutine to be scheduled. It returns
// when src ends (nil error at EOF) or a write fails; the reading goroutine
// ends with src, which the caller closes after a failed write, as a relay
// closes both sides when either ends.
func CopyPipelined(dst io.Writer, src io.Reader) (int64, error) {
	written, bulk, err := copyIdle(dst, src)
	if !bulk {
		return written, err
	}
	type chunk struct {
		buf *[]byte
		n   int
		err error
	}
	free := make(chan *[]byte, 2)
	full := make(chan chunk, 1)
	done := make(chan struct{})
	defer close(done)
	free <- copyBufs.Get().(*[]byte)
	free <- copyBufs.Get().(*[]byte)
	go func() {
		defer close(full)
		for {
			var buf *[]byte
			select {
			case buf = <-free:
			case <-done:
				return
			}
			n, err := src.Read(*buf)
			select {
			case full <- chunk{buf, n, err}:
			case <-done:
				copyBufs.Put(buf)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range full {
		n, err := writeFull(dst, (*c.buf)[:c.n])
		written += int64(n)
		if err != nil || c.err != nil {
			copyBufs.Put(c.buf)
			if err != nil {
				return written, err
			}
			return written, endOf(c.err)
		}
		free <- c.buf
	}
	return written, nil
}
