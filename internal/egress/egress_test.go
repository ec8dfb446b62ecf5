package egress

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/internal/syncbuf"
)

// newGuard returns a guard logging into the returned buffer.
func newGuard(t *testing.T, allow ...string) (*Guard, *syncbuf.Buffer) {
	t.Helper()
	var logs syncbuf.Buffer
	g, err := New(allow, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("New(%q): %v", allow, err)
	}
	return g, &logs
}

// noDial makes any real dial (and so any DNS lookup or packet) fail the test.
func noDial(t *testing.T, g *Guard) {
	t.Helper()
	g.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		t.Errorf("dialed %s %s: want refused before dialing", network, addr)
		return nil, errors.New("unexpected dial")
	}
}

func wantRefused(t *testing.T, err error, addr string) {
	t.Helper()
	var re *RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("got error %v, want a *RefusedError", err)
	}
	if re.Addr != addr {
		t.Errorf("got refused addr %q, want %q", re.Addr, addr)
	}
	want := "egress: connection to " + addr + " refused: not in the appliance's allow list (appliance.yaml egress-allow)"
	if re.Error() != want {
		t.Errorf("got message %q, want %q", re.Error(), want)
	}
}

func TestLoopbackAllowed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	g, logs := newGuard(t)
	client := &http.Client{Transport: g.Wrap(http.DefaultTransport.(*http.Transport)), Timeout: 5 * time.Second}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("get %s: %v", srv.URL, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Errorf("got body %q, want %q", body, "ok")
	}
	if logs.String() != "" {
		t.Errorf("got log %q, want nothing", logs.String())
	}
}

func TestRefusedIP(t *testing.T) {
	g, logs := newGuard(t, "10.0.0.0/8")
	noDial(t, g)
	start := time.Now()
	_, err := g.DialContext(context.Background(), "tcp", "192.0.2.1:80")
	if d := time.Since(start); d > time.Second {
		t.Errorf("refusal took %v, want immediate", d)
	}
	wantRefused(t, err, "192.0.2.1:80")
	if got := logs.String(); !strings.Contains(got, `msg="egress refused"`) || !strings.Contains(got, "addr=192.0.2.1:80") || !strings.Contains(got, "level=WARN") {
		t.Errorf("got log %q, want a warning naming 192.0.2.1:80", got)
	}
}

func TestRefusedNameWithoutLookup(t *testing.T) {
	g, logs := newGuard(t, "allowed.invalid")
	noDial(t, g)
	_, err := g.DialContext(context.Background(), "tcp", "not-allowed.invalid:443")
	wantRefused(t, err, "not-allowed.invalid:443")
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		t.Errorf("got a resolver error %v, want the guard's", err)
	}
	if !strings.Contains(logs.String(), "addr=not-allowed.invalid:443") {
		t.Errorf("got log %q, want the refused address", logs.String())
	}
}

func TestAllowedNameDialed(t *testing.T) {
	g, _ := newGuard(t, "Mirror.Example.Internal.")
	var dialed string
	g.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed = addr
		return nil, errors.New("stub")
	}
	_, _ = g.DialContext(context.Background(), "tcp", "mirror.example.internal:443")
	if dialed != "mirror.example.internal:443" {
		t.Errorf("got dial %q, want the allowed name dialed as given", dialed)
	}
}

func TestAllowed(t *testing.T) {
	g, _ := newGuard(t, "10.0.0.0/8", "fd00::/8", "192.168.1.5", "*.example.internal", "git.corp")
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.8.9.10", true},
		{"::1", true},
		{"0.0.0.0", true},
		{"localhost", true},
		{"LOCALHOST", true},
		{"10.1.2.3", true},
		{"::ffff:10.1.2.3", true},
		{"11.0.0.1", false},
		{"fd12::1", true},
		{"fe80::1%eth0", false},
		{"192.168.1.5", true},
		{"192.168.1.6", false},
		{"a.example.internal", true},
		{"A.B.Example.Internal", true},
		{"a.example.internal.", true},
		{"example.internal", false},
		{"badexample.internal", false},
		{"git.corp", true},
		{"GIT.CORP", true},
		{"www.git.corp", false},
		{"github.com", false},
		{"192.0.2.1", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			if got := g.Allowed(tc.host); got != tc.want {
				t.Errorf("Allowed(%q) = %v, want %v", tc.host, got, tc.want)
			}
		})
	}
}

func TestNewRejectsBadEntries(t *testing.T) {
	for _, entry := range []string{"", "10.0.0.0/33", "not a host", "example.com:443", "https://example.com", "*.", "a..b", "*.*.x"} {
		t.Run(entry, func(t *testing.T) {
			if _, err := New([]string{entry}, nil); err == nil {
				t.Errorf("New(%q): got nil error, want one", entry)
			}
		})
	}
}

func TestUnixSocketAllowed(t *testing.T) {
	dir, err := os.MkdirTemp("", "egress") // short: socket paths are limited to ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	g, _ := newGuard(t)
	c, err := g.DialContext(context.Background(), "unix", path)
	if err != nil {
		t.Fatalf("dial unix %s: %v", path, err)
	}
	c.Close()
}

func TestInstall(t *testing.T) {
	old := http.DefaultTransport
	t.Cleanup(func() { http.DefaultTransport = old })
	g, logs := newGuard(t)
	noDial(t, g)
	g.Install()
	_, err := http.Get("http://192.0.2.1/")
	wantRefused(t, err, "192.0.2.1:80")
	if !strings.Contains(logs.String(), "addr=192.0.2.1:80") {
		t.Errorf("got log %q, want the refused address", logs.String())
	}
}
