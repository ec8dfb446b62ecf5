package coderdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/testport"
	"airgapcoder/wsproxy"
)

// WorkspaceProxyOptions tune NewWorkspaceProxy.
type WorkspaceProxyOptions struct {
	// Logger receives the proxy's logs (default: discarded).
	Logger *slog.Logger
	// KeepAliveInterval is the proxy's yamux keepalive (default 1 s, so
	// that a dead session is noticed quickly in tests).
	KeepAliveInterval time.Duration
	// TLSCertificate, when set, makes the proxy serve HTTPS with it (its
	// access URL is then https://127.0.0.1:PORT); nil serves plain HTTP.
	TLSCertificate *tls.Certificate
	// WildcardAccessURL is the proxy's wildcard for subdomain apps (e.g.
	// "*.eu.test"; app URLs take the proxy's port); "" serves none.
	WildcardAccessURL string
	// Done, when set, receives Run's result once the proxy stops, by itself
	// (deleted, refused) or by the stop function. It must have room for
	// one value.
	Done chan error
}

// NewWorkspaceProxy creates workspace proxy name with owner's client (an
// owner of a coderdtest deployment) and runs it in this process, on a
// loopback port, against that deployment, with owner's HTTP client (and so
// its trust). It returns once the proxy is registered and its relay
// session is up (/healthz answers 200), with the proxy's access URL and a
// function that stops it (deregistering) and waits for it; the test's end
// stops it too. At most one WorkspaceProxyOptions is read.
func NewWorkspaceProxy(t testing.TB, owner *codersdk.Client, name string, opts ...WorkspaceProxyOptions) (*url.URL, func()) {
	t.Helper()
	var o WorkspaceProxyOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.KeepAliveInterval <= 0 {
		o.KeepAliveInterval = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	created, err := owner.CreateWorkspaceProxy(ctx, codersdk.CreateWorkspaceProxyRequest{Name: name})
	if err != nil {
		cancel()
		t.Fatalf("create workspace proxy %s: %v", name, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testport.Port(t))
	scheme := "http"
	if o.TLSCertificate != nil {
		scheme = "https"
	}
	access, _ := url.Parse(scheme + "://" + addr)
	httpClient := owner.HTTPClient
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	s, err := wsproxy.New(wsproxy.Options{
		PrimaryAccessURL: owner.URL, ProxySessionToken: created.ProxyToken, AccessURL: access, HTTPAddress: addr,
		WildcardAccessURL: o.WildcardAccessURL, TLSCertificate: o.TLSCertificate, HTTPClient: httpClient, Version: "v0.0.0-test", Hostname: "wsproxy-" + name,
		Logger: o.Logger, RegisterRetry: 50 * time.Millisecond, ShutdownTimeout: 5 * time.Second, KeepAliveInterval: o.KeepAliveInterval,
	})
	if err != nil {
		cancel()
		t.Fatalf("new workspace proxy %s: %v", name, err)
	}
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	var result error
	stopped := make(chan struct{})
	go func() {
		result = <-ran
		if o.Done != nil {
			select {
			case o.Done <- result:
			default:
			}
		}
		close(stopped)
	}()
	stop := func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(20 * time.Second):
			t.Errorf("workspace proxy %s did not stop within 20s", name)
		}
	}
	t.Cleanup(stop)

	// Up: registered and its relay session dialed.
	probe := &http.Client{Transport: httpClient.Transport, Timeout: 5 * time.Second}
	if o.TLSCertificate != nil {
		leaf, err := x509.ParseCertificate(o.TLSCertificate.Certificate[0])
		if err != nil {
			t.Fatalf("parse the workspace proxy's certificate: %v", err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(leaf)
		probe.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	defer probe.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-stopped:
			t.Fatalf("workspace proxy %s stopped before it was up: %v", name, result)
		default:
		}
		if resp, err := probe.Get(access.JoinPath("/healthz").String()); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return access, stop
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace proxy %s: /healthz not 200 within 30s (registered and relay session up)", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
