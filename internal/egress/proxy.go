package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"
)

// Proxy is an HTTP forward proxy through the guard, for programs that open
// their own connections but honour HTTPS_PROXY and HTTP_PROXY (terraform,
// the git it calls, providers): a CONNECT tunnel or a plain request to an
// allowed host is passed on; any other is answered 403 with the guard's
// refusal, so the program fails at once on loopback and its destination's
// name is never looked up here. onRefuse, when set, hears each refused
// host:port.
func (g *Guard) Proxy(onRefuse func(addr string)) http.Handler {
	transport := g.Wrap(&http.Transport{ForceAttemptHTTP2: false, IdleConnTimeout: 30 * time.Second})
	refuse := func(w http.ResponseWriter, addr string, err error) {
		if onRefuse != nil {
			onRefuse(addr)
		}
		http.Error(w, err.Error(), http.StatusForbidden)
	}
	forward := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = pr.In.URL
			pr.Out.Host = pr.In.Host
		},
		Transport: transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var refused *RefusedError
			if errors.As(err, &refused) {
				refuse(w, refused.Addr, err)
				return
			}
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodConnect:
			g.tunnel(w, r, refuse)
		case r.URL.Host != "":
			forward.ServeHTTP(w, r)
		default:
			http.Error(w, "this is a forward proxy: ask for an absolute URL or CONNECT", http.StatusBadRequest)
		}
	})
}

// tunnel answers a CONNECT: it dials the target through the guard and
// copies bytes both ways until either side closes.
func (g *Guard) tunnel(w http.ResponseWriter, r *http.Request, refuse func(http.ResponseWriter, string, error)) {
	addr := r.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "443")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	target, err := g.DialContext(ctx, "tcp", addr)
	cancel()
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		refuse(w, refused.Addr, err)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer target.Close()
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer client.Close()
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(target, buf) // what the client sent after CONNECT, then the rest
		if tc, ok := target.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(client, target)
	_ = client.Close()
	wg.Wait()
}
