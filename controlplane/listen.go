package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"airgapcoder/coderd/appurl"
	"airgapcoder/coderd/replicasync"
	"airgapcoder/internal/bodydeadline"
	"airgapcoder/relayconn"
)

// listen opens the plain HTTP and the HTTPS listener (whichever are on)
// and registers each for closing as soon as it is open.
func (st *startup) listen(context.Context) error {
	s := st.s
	if s.cfg.HTTPAddress != "" {
		ln, err := net.Listen("tcp", s.cfg.HTTPAddress)
		if err != nil {
			return fmt.Errorf("listen on --http-address %s: %w", s.cfg.HTTPAddress, err)
		}
		st.stop.Push("HTTP listener", closeListener(ln))
		st.httpLn = ln
	}
	if s.cfg.TLS.Enable {
		ln, err := net.Listen("tcp", s.cfg.TLS.Address)
		if err != nil {
			return fmt.Errorf("listen on --tls-address %s: %w", s.cfg.TLS.Address, err)
		}
		st.stop.Push("HTTPS listener", closeListener(ln))
		st.tlsLn = ln
	}
	if s.cfg.Prometheus.Enable {
		addr := s.cfg.Prometheus.Address
		if addr == "" {
			addr = DefaultPrometheusAddress
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on --prometheus-address %s: %w", addr, err)
		}
		st.stop.Push("Prometheus listener", closeListener(ln))
		st.metricsLn = ln
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.httpLn != nil {
		s.httpAddr = st.httpLn.Addr()
		s.urls = append(s.urls, "http://"+advertisedAddr(s.httpAddr, s.cfg.AdvertiseHost))
	}
	if st.tlsLn != nil {
		s.tlsAddr = st.tlsLn.Addr()
		s.urls = append(s.urls, "https://"+advertisedAddr(s.tlsAddr, s.cfg.AdvertiseHost))
	}
	return nil
}

// closeListener closes ln at shutdown. After a graceful shutdown the HTTP
// server has closed it already; closing again does nothing.
func closeListener(ln net.Listener) func(context.Context) error {
	return func(context.Context) error {
		_ = ln.Close()
		return nil
	}
}

// resolveAccessURL is the configured access URL, or one derived from the
// listener (the HTTPS one when TLS is on).
func (st *startup) resolveAccessURL(context.Context) error {
	s := st.s
	raw := s.cfg.AccessURL
	if raw == "" {
		var ln net.Listener
		raw, ln = st.ownURL()
		if host, _, _ := net.SplitHostPort(ln.Addr().String()); net.ParseIP(host).IsUnspecified() {
			s.log.Warn("listening on every interface without --access-url: workspaces and redirects use "+raw+"; set --access-url to the name users reach this server by",
				"listen", ln.Addr().String())
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.accessURL = u
	s.mu.Unlock()
	st.accessURL = u
	return nil
}

// ownURL is this server's own address as clients use it: the HTTPS
// listener when TLS is on, else the HTTP one, with the advertised host in
// place of an unspecified one.
func (st *startup) ownURL() (string, net.Listener) {
	ln, scheme := st.httpLn, "http://"
	if st.tlsLn != nil {
		ln, scheme = st.tlsLn, "https://"
	}
	return scheme + advertisedAddr(ln.Addr(), st.s.cfg.AdvertiseHost), ln
}

// registerReplica lists this server among the deployment's replicas, with
// its own listener (not the access URL, which may be a load balancer) as
// the address other replicas reach it at. It fails when replicas of
// another version serve the deployment.
func (st *startup) registerReplica(ctx context.Context) error {
	relay, _ := st.ownURL()
	hostname, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("hostname: %w", err)
	}
	m, err := replicasync.New(ctx, st.db, st.pubsub, replicasync.Options{
		Hostname: hostname, RelayAddress: relay,
		Version: st.s.cfg.Version, Interval: st.s.cfg.ReplicaHeartbeatInterval, Logger: st.log.With("component", "replicas"), Clock: st.s.cfg.Clock,
	})
	if err != nil {
		return err
	}
	st.replicas = m
	st.stop.Go(ctx, "replica heartbeat", m.Run)
	return nil
}

// serveHTTP serves handler on ln (HTTPS when tlsCfg is set) in a goroutine
// and registers its shutdown: long-polls are told to answer (API.Shutdown),
// in-flight requests get until ctx ends, then connections are closed. A
// server that stops by itself ends Run through st.failed.
func (st *startup) serveHTTP(name string, ln net.Listener, handler http.Handler, tlsCfg *tls.Config) {
	srv := newHTTPServer(handler, tlsCfg, st.log, bodydeadline.Default)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var err error
		if tlsCfg != nil {
			// Relay connections send each write's TLS records in one
			// syscall (relayconn.BatchingListener).
			err = srv.ServeTLS(relayconn.BatchingListener(ln), "", "")
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			select {
			case st.failed <- fmt.Errorf("serve %s on %s: %w", name, ln.Addr(), err):
			default:
			}
		}
	}()
	st.stop.Push(name+" server", func(ctx context.Context) error {
		// Answer waiting job requests now rather than at their long-poll
		// deadline.
		st.api.Shutdown()
		if err := srv.Shutdown(ctx); err != nil {
			st.log.Warn("graceful shutdown timed out; closing connections", "server", name, "err", err)
			_ = srv.Close()
		}
		<-done
		return nil
	})
}

// newHTTPServer is the HTTP server of a public listener, with its
// timeouts: headers within 10 s, a request's body within bodyTimeout of its
// start (bodydeadline.Wrap, around every handler: the API sets it
// again itself, and lifts it for authenticated uploads and dev URLs; here
// it also covers /metrics and the plain HTTP listener's redirect), idle
// connections closed after 2 minutes. No WriteTimeout and no ReadTimeout:
// log streams, long-polls and relayed connections stay open by design.
func newHTTPServer(handler http.Handler, tlsCfg *tls.Config, log *slog.Logger, bodyTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler: bodydeadline.Wrap(bodyTimeout, handler), TLSConfig: tlsCfg,
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// redirectToHTTPS answers every plain HTTP request with a permanent redirect
// (308, which keeps the method and body) to the same path and query under
// target, the https access URL. /healthz is the exception: load balancers
// and scripts probe it on either listener.
func redirectToHTTPS(target *url.URL, apps appurl.Wildcard, health http.Handler) http.Handler {
	base := strings.TrimSuffix(target.String(), "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			health.ServeHTTP(w, r)
			return
		}
		// An app host stays itself, on the port app URLs use.
		if sub, ok := apps.Match(r.Host); ok && !strings.EqualFold(hostOnly(r.Host), target.Hostname()) {
			http.Redirect(w, r, "https://"+apps.Host(sub, target)+r.URL.RequestURI(), http.StatusPermanentRedirect)
			return
		}
		http.Redirect(w, r, base+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// strictTransportSecurity adds the Strict-Transport-Security header to
// every response: browsers then use only HTTPS for this host and refuse to
// let a user click through a certificate warning.
func strictTransportSecurity(maxAge int, next http.Handler) http.Handler {
	value := "max-age=" + strconv.Itoa(maxAge)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", value)
		next.ServeHTTP(w, r)
	})
}

// advertisedAddr is addr with an unspecified host (0.0.0.0, ::) replaced
// by host: a listener on every interface is reached by a name, never by
// the wildcard.
func advertisedAddr(addr net.Addr, host string) string {
	h, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		h = host
	}
	return net.JoinHostPort(h, port)
}
