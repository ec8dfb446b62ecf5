package provisionerd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Containment: what the import preflight (preflight.go) cannot see,
// terraform must still not fetch from the network.
//
//   - The CLI configuration lets terraform install providers from the
//     mirror only, and sends every module registry host it knows (the
//     module mirror's, registry.terraform.io and registry.coder.com) to
//     the module mirror (cliConfig).
//   - Every other HTTP(S) fetch, by terraform (a registry host it would
//     discover, an http module archive), the git it calls or a provider,
//     goes through the daemon's egress proxy (HTTPS_PROXY, HTTP_PROXY):
//     the proxy passes loopback and the hosts Options.Egress allows and
//     answers anything else 403 at once, so the name is never looked up and
//     nothing leaves the machine. NO_PROXY names the mirrors and the access
//     URL, which are reached directly.
//   - git may use file, http and https only (GIT_ALLOW_PROTOCOL): ssh and
//     git:// would resolve their hosts themselves, outside the proxy.
//
// A refusal is written to the job's log, and the guard logs and counts it
// (coder appliance status shows the count).

// knownModuleHosts are registry hosts templates name whose modules must come
// from the module mirror, bundled or not.
var knownModuleHosts = []string{"registry.terraform.io", "registry.coder.com"}

// serveEgressProxy starts the egress proxy on loopback for the daemon's
// jobs; the returned function stops it.
func (d *Daemon) serveEgressProxy() (func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	srv := &http.Server{
		Handler:           d.opts.Egress.Proxy(d.refused),
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("egress proxy", "err", err)
		}
	}()
	d.mu.Lock()
	d.proxyURL = "http://" + ln.Addr().String()
	d.mu.Unlock()
	return func() {
		// Real time, not Options.Clock: this bounds how long a stop may
		// take (net/http waits for connections on real time), and a test's
		// mock clock must not hold its cleanup.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
		d.mu.Lock()
		d.proxyURL = ""
		d.mu.Unlock()
	}, nil
}

// setJobLogs names the running job's log (nil: none runs).
func (d *Daemon) setJobLogs(l *jobLogs) {
	d.mu.Lock()
	d.jobLogs = l
	d.mu.Unlock()
}

// refused tells the running job's log that its terraform tried to reach
// addr.
func (d *Daemon) refused(addr string) {
	d.mu.Lock()
	logs := d.jobLogs
	d.mu.Unlock()
	if logs != nil {
		logs.Error(fmt.Sprintf("Refused: terraform (or a provider, or git) tried to reach %s, outside the appliance; nothing was sent and its name was not looked up. "+
			"Bring what it fetches in the bundle, or allow the host (egress-allow in appliance.yaml) if it is the site's.", addr))
	}
}

// containmentEnv is the environment that sends terraform's own fetches
// through the egress proxy.
func (d *Daemon) containmentEnv() map[string]string {
	d.mu.Lock()
	proxy := d.proxyURL
	d.mu.Unlock()
	if proxy == "" {
		return nil
	}
	direct := []string{"localhost", "127.0.0.1", "::1"}
	for _, u := range []string{d.opts.ProviderMirror, d.opts.ModuleMirror, d.opts.AccessURL} {
		if p, err := url.Parse(u); err == nil && p.Hostname() != "" && !slices.Contains(direct, p.Hostname()) {
			direct = append(direct, p.Hostname())
		}
	}
	noProxy := strings.Join(direct, ",")
	return map[string]string{
		"HTTPS_PROXY": proxy, "https_proxy": proxy,
		"HTTP_PROXY": proxy, "http_proxy": proxy,
		"NO_PROXY": noProxy, "no_proxy": noProxy,
		"GIT_ALLOW_PROTOCOL":  "file:http:https",
		"GIT_TERMINAL_PROMPT": "0",
	}
}

// moduleHostsFor are the hosts the CLI configuration sends to the module
// mirror: the mirror's own and the well-known registries.
func moduleHostsFor(mirrorHosts []string) []string {
	hosts := slices.Clone(mirrorHosts)
	for _, h := range knownModuleHosts {
		if !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	slices.Sort(hosts)
	return hosts
}
