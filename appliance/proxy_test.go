package appliance_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"airgapcoder/appliance"
	"airgapcoder/bundle"
	"airgapcoder/certs"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testport"
)

// fakePrimary is the primary's side of a proxy's registration: it accepts
// token and records what the proxy sends.
type fakePrimary struct {
	srv    *httptest.Server
	caFile string

	mu           sync.Mutex
	registered   []codersdk.RegisterWorkspaceProxyRequest
	deregistered int
}

func newFakePrimary(t *testing.T, token string) *fakePrimary {
	t.Helper()
	p := &fakePrimary{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v2/workspaceproxies/me/register", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(codersdk.ExternalProxyAuthTokenHeader) != token {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(codersdk.Response{Message: "Invalid workspace proxy token."})
			return
		}
		var req codersdk.RegisterWorkspaceProxyRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.registered = append(p.registered, req)
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(codersdk.RegisterWorkspaceProxyResponse{ProxyID: "0d6e", ProxyName: "eu", HeartbeatIntervalMillis: 1000})
	})
	mux.HandleFunc("POST /api/v2/workspaceproxies/me/deregister", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		p.deregistered++
		p.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	p.srv = httptest.NewTLSServer(mux)
	t.Cleanup(p.srv.Close)
	p.caFile = filepath.Join(t.TempDir(), "primary-ca.pem")
	if err := os.WriteFile(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *fakePrimary) counts() (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.registered), p.deregistered
}

// TestUpProxy runs Up with role: proxy in this process against a fake
// primary: it registers with the token from the file, trusting
// primary-ca-file, serves /healthz over HTTPS with the appliance CA's
// certificate, shows in status as a proxy, starts nothing else, and on
// cancellation deregisters and stops everything. A token the primary
// refuses makes Up fail at once, naming the step.
func TestUpProxy(t *testing.T) {
	bundlePath, pub := testBundle(t, "2026.11.1")
	dir := prepDir(t)
	k, _ := bundle.LoadPublicKey(pub)
	const token = "0d6e:c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"
	primary := newFakePrimary(t, token)
	tokenFile := filepath.Join(t.TempDir(), "proxy-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsAddr, httpAddr := testport.Addr(t), testport.Addr(t)
	config := func(tokenFile string) string {
		return "role: proxy\ntls-address: " + tlsAddr + "\nhttp-address: " + httpAddr + "\naccess-url: https://localhost:" + portOf(tlsAddr) +
			"\nprimary-access-url: " + primary.srv.URL + "\nproxy-session-token-file: " + tokenFile + "\nprimary-ca-file: " + primary.caFile + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, appliance.ConfigFile), []byte(config(tokenFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := appliance.Install(context.Background(), appliance.InstallOptions{Bundle: bundlePath, Dir: dir, PublicKey: k}); err != nil {
		t.Fatal(err)
	}
	// Up installs its egress guard around the default transport.
	saved := http.DefaultTransport
	t.Cleanup(func() { http.DefaultTransport = saved })

	t.Run("serves and deregisters", func(t *testing.T) {
		before := goleak.IgnoreCurrent()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ready := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- appliance.Up(ctx, appliance.UpOptions{Dir: dir, Logger: slog.New(slog.DiscardHandler), Ready: ready})
		}()
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("Up: %v, want the proxy ready", err)
		case <-ctx.Done():
			t.Fatal("the proxy was not ready within 2 minutes")
		}
		if n, _ := primary.counts(); n == 0 {
			t.Fatal("ready before the primary saw a registration")
		}
		primary.mu.Lock()
		reg := primary.registered[0]
		primary.mu.Unlock()
		if want := "https://localhost:" + portOf(tlsAddr); reg.AccessURL != want || len(reg.HealthReport.Errors) != 0 {
			t.Errorf("registered access URL %q with errors %v, want %q and none (the appliance CA's certificate covers it)", reg.AccessURL, reg.HealthReport.Errors, want)
		}
		st, err := appliance.GetStatus(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		// The proxy answers over HTTPS, verified with the appliance CA:
		// ok, or starting while its /healthz waits for more than the
		// registration (a fake primary serves no relay session), with
		// the primary named either way.
		var names []string
		for _, c := range st.Components {
			names = append(names, c.Name)
			if c.Name == "wsproxy" && (c.State != "ok" && c.State != "starting" || !strings.Contains(c.Detail, primary.srv.URL)) {
				t.Errorf("status of the proxy: %+v, want ok or starting, naming the primary", c)
			}
		}
		if st.Role != appliance.RoleProxy || strings.Join(names, ",") != "wsproxy,egress" {
			t.Errorf("status: role %q, components %v; want proxy and only wsproxy and egress", st.Role, names)
		}
		// Plain HTTP redirects to the access URL; /healthz is the proxy's.
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Transport: &http.Transport{}}
		res, err := noFollow.Get("http://" + httpAddr + "/some/path?x=1")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if want := "https://localhost:" + portOf(tlsAddr) + "/some/path?x=1"; res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != want {
			t.Errorf("plain HTTP: %d to %q, want 308 to %q", res.StatusCode, res.Header.Get("Location"), want)
		}
		overHTTPS := httpsGet(t, dir, "https://"+tlsAddr+"/healthz")
		if overHTTP := httpGet(t, noFollow, "http://"+httpAddr+"/healthz"); overHTTP != overHTTPS {
			t.Errorf("plain HTTP /healthz: %q, want the proxy's answer over HTTPS, %q", overHTTP, overHTTPS)
		}
		// Nothing but the proxy: no database, no mirror.
		if _, err := os.Stat(filepath.Join(dir, "data", "postgres", "PG_VERSION")); err == nil {
			t.Error("the proxy initialized a database in data/postgres")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Up after cancel: %v, want nil", err)
		}
		if _, n := primary.counts(); n != 1 {
			t.Errorf("deregistered %d times, want once", n)
		}
		for _, addr := range []string{tlsAddr, httpAddr} {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("%s still taken after Up returned: %v", addr, err)
			}
			ln.Close()
		}
		for _, tr := range []http.RoundTripper{http.DefaultTransport, saved} {
			if c, ok := tr.(interface{ CloseIdleConnections() }); ok {
				c.CloseIdleConnections()
			}
		}
		primary.srv.CloseClientConnections()
		goleak.VerifyNone(t, append(coderdtest.LeakOptions(), before)...)
	})

	t.Run("refused token", func(t *testing.T) {
		wrong := filepath.Join(t.TempDir(), "proxy-token")
		if err := os.WriteFile(wrong, []byte("0d6e:wrong"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, appliance.ConfigFile), []byte(config(wrong)), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := appliance.Up(ctx, appliance.UpOptions{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
		if ctx.Err() != nil {
			t.Fatal("Up still running a minute after the primary refused the token")
		}
		if err == nil || !strings.HasPrefix(err.Error(), "start workspace proxy: ") || !strings.Contains(err.Error(), "refused") ||
			strings.Contains(err.Error(), "wrong") {
			t.Fatalf("Up: %v; want the refusal, naming the step and not the token", err)
		}
	})
}

// httpGet is the status and body of a GET of u with client.
func httpGet(t *testing.T, client *http.Client, u string) string {
	t.Helper()
	res, err := client.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status + " " + strings.TrimSpace(string(b))
}

// httpsGet is httpGet over HTTPS, trusting the appliance's trust.pem and
// verifying the certificate as localhost.
func httpsGet(t *testing.T, dir, u string) string {
	t.Helper()
	trust, err := certs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr := trust.Transport()
	tr.Proxy = nil
	tr.TLSClientConfig.ServerName = "localhost"
	return httpGet(t, &http.Client{Transport: tr}, u)
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
