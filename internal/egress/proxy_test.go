package egress

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestProxy: through the proxy, a CONNECT or a plain request to a host
// outside the allow list is answered 403 without any dial (so no lookup of
// its name), counted, and told to onRefuse; a CONNECT to loopback is a
// working tunnel.
func TestProxy(t *testing.T) {
	g, err := New([]string{"allowed.example"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	var totals []int64
	g.OnRefuse(func(addr string, total int64) { totals = append(totals, total) })
	srv := httptest.NewServer(g.Proxy(func(addr string) { refused = append(refused, addr) }))
	defer srv.Close()

	// A loopback echo server, reached through a tunnel.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	connect := func(target string) (*http.Response, net.Conn) {
		t.Helper()
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		return resp, c
	}
	resp, c := connect(ln.Addr().String())
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT to loopback: %s", resp.Status)
	}
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("through the tunnel: %q, %v", buf, err)
	}
	c.Close()

	noDial(t, g)
	resp, c = connect("registry.coder.com:443")
	body, _ := io.ReadAll(resp.Body)
	c.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "registry.coder.com:443 refused") {
		t.Errorf("CONNECT to registry.coder.com: %s %q, want 403 naming it", resp.Status, body)
	}
	proxyURL, _ := url.Parse(srv.URL)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	resp, err = client.Get("http://releases.example/terraform.zip")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET through the proxy: %s, want 403", resp.Status)
	}
	if got := strings.Join(refused, " "); got != "registry.coder.com:443 releases.example:80" {
		t.Errorf("onRefuse heard %q", got)
	}
	if g.Refused() != 2 || len(totals) != 2 || totals[1] != 2 {
		t.Errorf("Refused() = %d, OnRefuse totals %v; want 2", g.Refused(), totals)
	}
}
