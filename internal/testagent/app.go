package testagent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// App is a web server on loopback that stands for an app inside a
// workspace: a workspace's agent reaches it at 127.0.0.1:Port. It records
// every request it gets, so that a test can check what a visitor's request
// became on its way through coderd, a proxy and the agent.
type App struct {
	// Port is the loopback port the app listens on.
	Port int

	mu   sync.Mutex
	seen []*http.Request
}

// NewApp starts an App until the test ends. next answers each request once
// it is recorded; nil answers as [AnswerApp] does.
func NewApp(t testing.TB, next http.Handler) *App {
	t.Helper()
	if next == nil {
		next = http.HandlerFunc(AnswerApp)
	}
	a := &App{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Clone(context.Background()))
		a.mu.Unlock()
		next.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatalf("testagent: app address: %v", err)
	}
	if a.Port, err = strconv.Atoi(port); err != nil {
		t.Fatalf("testagent: app port: %v", err)
	}
	return a
}

// AnswerApp is an App's answer unless NewApp is given another: the body
// "app <path>?<query>", and the connection closed after it, because a
// relayed connection is reported (and audited) only when it ends.
func AnswerApp(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	fmt.Fprintf(w, "app %s?%s", r.URL.Path, r.URL.RawQuery)
}

// URL is the app's address as a workspace template names it:
// http://127.0.0.1:Port.
func (a *App) URL() string {
	return "http://127.0.0.1:" + strconv.Itoa(a.Port)
}

// Last is the last request the app got; none fails the test.
func (a *App) Last(t testing.TB) *http.Request {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		t.Fatal("the app received no request")
	}
	return a.seen[len(a.seen)-1]
}

// Request is the last request the app got for path; none fails the test.
func (a *App) Request(t testing.TB, path string) *http.Request {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.seen) - 1; i >= 0; i-- {
		if a.seen[i].URL.Path == path {
			return a.seen[i]
		}
	}
	t.Fatalf("the app got no request for %s", path)
	return nil
}

// EchoWebSocket accepts r as a WebSocket with opts (nil: coder/websocket's
// default origin check, which refuses with 403 an Origin whose host is not
// the request's Host, as Jupyter and code-server check), reads one message
// and answers it with prefix before it, then closes. An App's handler calls
// it for the paths where the app serves a WebSocket.
func EchoWebSocket(w http.ResponseWriter, r *http.Request, opts *websocket.AcceptOptions, prefix string) {
	c, err := websocket.Accept(w, r, opts)
	if err != nil {
		return
	}
	defer c.CloseNow()
	typ, msg, err := c.Read(r.Context())
	if err != nil {
		return
	}
	_ = c.Write(r.Context(), typ, append([]byte(prefix), msg...))
	_ = c.Close(websocket.StatusNormalClosure, "")
}

// Count is how many requests the app got.
func (a *App) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

// WebSocketRoundTrip dials the WebSocket at rawURL with opts, sends msg as
// a message of type typ and returns the first message it gets back, for a
// test to compare with what an echo in the workspace answers. A failed dial
// (with the status it got, if any), write or read fails the test; ctx
// bounds it all.
func WebSocketRoundTrip(ctx context.Context, t testing.TB, rawURL string, opts *websocket.DialOptions, typ websocket.MessageType, msg string) string {
	t.Helper()
	c, resp, err := websocket.Dial(ctx, rawURL, opts)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial WebSocket %s: %v (status %d)", rawURL, err, status)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, typ, []byte(msg)); err != nil {
		t.Fatalf("write to WebSocket %s: %v", rawURL, err)
	}
	_, got, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read from WebSocket %s: %v", rawURL, err)
	}
	return string(got)
}

// NewAppClient is a browser's HTTP client for apps on hosts under a
// wildcard access URL, which no resolver knows: it dials every host whose
// name ends in hostSuffix ("" for every host) at addr (host:port), and any
// other host as named. It keeps cookies in the returned jar, follows
// redirects only if follow, and gives up on a request after 30 seconds.
func NewAppClient(t testing.TB, addr, hostSuffix string, follow bool) (*http.Client, *cookiejar.Jar) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatalf("testagent: cookie jar: %v", err)
	}
	dialer := &net.Dialer{}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, hostport string) (net.Conn, error) {
		if h, _, _ := net.SplitHostPort(hostport); strings.HasSuffix(h, hostSuffix) {
			hostport = addr
		}
		return dialer.DialContext(ctx, network, hostport)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Jar: jar, Transport: tr, Timeout: 30 * time.Second}
	if !follow {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return c, jar
}

// Do sends method rawURL with header through c and returns the response
// and its body, read and closed. A request that gets no response fails the
// test.
func Do(t testing.TB, c *http.Client, method, rawURL string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the body: %v", method, rawURL, err)
	}
	return resp, string(b)
}
