package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
	"airgapcoder/internal/atomicfile"
)

// Region choice for the commands that connect to a workspace: coder ssh
// (and the ProxyCommand coder config-ssh writes), coder port-forward and
// coder ping. A deployment reaches its workspaces from regions: the
// primary (coderd) and its workspace proxies (docs/wsproxy.md). Every API
// call goes to the primary; only the relay connections
// (GET /api/v2/workspaceagents/{agent}/connect) go to the chosen region, on
// a copy of the primary's client (codersdk.Client.WithURL: the same token
// and trust) whose URL is the region's access URL.
//
// --proxy (CODER_WORKSPACE_PROXY) chooses the region:
//
//   - "primary": the primary.
//   - a proxy's name: that proxy. One that is not healthy gets a warning
//     and the primary; a name that is no proxy is a usage error that lists
//     the regions.
//   - "auto" (the default): the healthy region with the lowest latency,
//     measured in parallel (the median of regionProbes GETs of /healthz,
//     each within regionProbeTimeout) and remembered per deployment for
//     regionCacheTTL in regionCacheFile under the global config folder, so
//     that a ProxyCommand does not measure at every connection. The choice
//     is logged at debug level (-v) only: a ProxyCommand's stdout is the
//     SSH stream.
//
// A dial through a proxy that fails for the proxy's sake (refused, timed
// out, a TLS error, a 5xx answer the primary does not give too) falls back
// to the primary for the rest of the command, with one line on stderr, and
// forgets the remembered choice. A refusal the primary would give too
// (401, 403, 404, 409, a bad request) is reported as it is.

const (
	// regionPrimary names the primary region, as GET /api/v2/regions does.
	regionPrimary = "primary"
	// regionAuto chooses the region by latency.
	regionAuto = "auto"
	// regionCacheFile, under the global config folder, remembers the
	// region "auto" chose for each deployment.
	regionCacheFile = "region-choice.json"
	// regionCacheTTL is how long a remembered choice is used.
	regionCacheTTL = 5 * time.Minute
	// regionProbeTimeout bounds one latency probe; a region whose probe
	// fails or times out is not chosen.
	regionProbeTimeout = 1500 * time.Millisecond
	// regionProbes is the number of probes per region; the median counts,
	// so the first (which opens the connection) does not.
	regionProbes = 3
	// regionMeasureTimeout bounds the whole measurement: a region slower
	// than that is not worth choosing, and a ProxyCommand is waiting.
	regionMeasureTimeout = 3 * time.Second
	// proxyDialTimeout bounds a dial through a proxy, so that a proxy that
	// swallows packets leaves time to fall back to the primary.
	proxyDialTimeout = 10 * time.Second
)

// regionOptions map --proxy to the environment.
var regionOptions = options{{flag: "proxy", env: "CODER_WORKSPACE_PROXY"}}

// proxyFlag declares --proxy on a command that connects to workspaces.
func proxyFlag(cmd *cobra.Command, name *string) {
	cmd.Flags().StringVar(name, "proxy", regionAuto,
		`Region to connect through (CODER_WORKSPACE_PROXY): "auto" picks the lowest latency (measured, remembered for 5m), "primary" is coderd itself, else a workspace proxy's name`)
}

// agentRoute resolves --proxy for cmd: where its relay connections go.
func (inv *invocation) agentRoute(ctx context.Context, cmd *cobra.Command, client *codersdk.Client, proxy string) (*agentRoute, error) {
	return inv.regionChooser(cmd, client).route(ctx, proxy)
}

func (inv *invocation) regionChooser(cmd *cobra.Command, client *codersdk.Client) *regionChooser {
	return &regionChooser{
		client:    client,
		cachePath: filepath.Join(inv.globalConfig, regionCacheFile),
		now:       time.Now,
		log:       inv.loggerFor(cmd),
		warn:      inv.stderr,
	}
}

// regionChooser turns --proxy into an agentRoute.
type regionChooser struct {
	// client is the primary's.
	client *codersdk.Client
	// cachePath is the file of remembered choices ("": none).
	cachePath string
	// now is the clock of the remembered choices' age.
	now func() time.Time
	// log gets the choice and the measurements at debug level.
	log *slog.Logger
	// warn gets the warnings the user must see (stderr).
	warn io.Writer
	// probeTimeout and probes default to regionProbeTimeout and
	// regionProbes.
	probeTimeout time.Duration
	probes       int
}

// route resolves name ("auto", "primary" or a proxy's name; "" is auto).
func (rc *regionChooser) route(ctx context.Context, name string) (*agentRoute, error) {
	r := &agentRoute{primary: rc.client, warn: rc.warn}
	var reg codersdk.Region
	switch {
	case name == "" || strings.EqualFold(name, regionAuto):
		reg = rc.auto(ctx)
		r.onFallBack = func() { rc.forget(reg.Name) }
	case strings.EqualFold(name, regionPrimary):
		return r, nil
	default:
		var why string
		var err error
		reg, why, err = rc.lookupProxy(ctx, name)
		if err != nil {
			return nil, err
		}
		if why != "" {
			fmt.Fprintf(rc.warn, "coder: workspace proxy %q %s; connecting through the primary\n", name, why)
			return r, nil
		}
	}
	if reg.Name == "" || strings.EqualFold(reg.Name, regionPrimary) {
		return r, nil
	}
	u, err := url.Parse(reg.PathAppURL)
	if err != nil || u.Host == "" {
		fmt.Fprintf(rc.warn, "coder: workspace proxy %q has no usable access URL (%q); connecting through the primary\n", reg.Name, reg.PathAppURL)
		return r, nil
	}
	r.proxy, r.proxyName = rc.client.WithURL(u), reg.Name
	return r, nil
}

// lookupProxy finds the proxy called name among the regions (GET
// /api/v2/regions lists every proxy, with its health). why is set when it
// exists but cannot be used (not healthy, or no access URL yet); a name
// that is no region is a usage error listing the regions.
func (rc *regionChooser) lookupProxy(ctx context.Context, name string) (reg codersdk.Region, why string, err error) {
	regions, err := rc.client.Regions(ctx)
	if err != nil {
		return codersdk.Region{}, "", fmt.Errorf("list the deployment's regions for --proxy %s: %w", name, err)
	}
	names := make([]string, 0, len(regions))
	for _, r := range regions {
		names = append(names, r.Name)
		if !strings.EqualFold(r.Name, name) {
			continue
		}
		switch {
		case !r.Healthy:
			return r, "is not healthy (coder wsproxy ls shows why)", nil
		case r.PathAppURL == "":
			return r, "has not registered its access URL yet", nil
		}
		return r, "", nil
	}
	return codersdk.Region{}, "", usageErrorf("--proxy %s: the deployment has no workspace proxy of that name; choose one of %s, or auto",
		name, strings.Join(names, ", "))
}

// auto returns the region to use by latency: the remembered one while it
// is fresh, else the healthy region whose /healthz answers fastest (the
// primary when none answers, or when the regions cannot be listed).
func (rc *regionChooser) auto(ctx context.Context) codersdk.Region {
	primary := codersdk.Region{Name: regionPrimary, Healthy: true, PathAppURL: rc.client.URL.String()}
	if reg, ok := rc.remembered(); ok {
		rc.log.Debug("region remembered", "region", reg.Name, "url", reg.PathAppURL, "file", rc.cachePath)
		return reg
	}
	regions, err := rc.client.Regions(ctx)
	if err != nil {
		rc.log.Debug("list regions: connecting through the primary", "error", err)
		return primary
	}
	var candidates []codersdk.Region
	for _, r := range regions {
		if r.Name == regionPrimary {
			r.PathAppURL = rc.client.URL.String() // as the CLI reaches it
		}
		if r.Healthy && r.PathAppURL != "" {
			candidates = append(candidates, r)
		}
	}
	best := primary
	if len(candidates) > 1 || (len(candidates) == 1 && candidates[0].Name != regionPrimary) {
		var bestLatency time.Duration
		for _, m := range rc.measure(ctx, candidates) {
			if m.err != nil {
				rc.log.Debug("region latency", "region", m.region.Name, "url", m.region.PathAppURL, "error", m.err)
				continue
			}
			rc.log.Debug("region latency", "region", m.region.Name, "url", m.region.PathAppURL, "latency", m.latency)
			if bestLatency == 0 || m.latency < bestLatency {
				best, bestLatency = m.region, m.latency
			}
		}
	}
	rc.log.Debug("region chosen by latency", "region", best.Name, "url", best.PathAppURL)
	rc.remember(best)
	return best
}

// regionLatency is one region's measured latency, or why it has none.
type regionLatency struct {
	region  codersdk.Region
	latency time.Duration
	err     error
}

// measure probes every region at once, within regionMeasureTimeout, and
// returns their latencies in the regions' order. The probes carry no
// session token: /healthz needs none, and a region not chosen gets none.
func (rc *regionChooser) measure(ctx context.Context, regions []codersdk.Region) []regionLatency {
	ctx, cancel := context.WithTimeout(ctx, regionMeasureTimeout)
	defer cancel()
	out := make([]regionLatency, len(regions))
	var wg sync.WaitGroup
	for i, r := range regions {
		out[i].region = r
		wg.Go(func() {
			u, err := url.Parse(r.PathAppURL)
			if err != nil {
				out[i].err = fmt.Errorf("parse the region's URL: %w", err)
				return
			}
			c := rc.client.WithURL(u)
			c.SessionToken = ""
			out[i].latency, out[i].err = rc.probe(ctx, c)
		})
	}
	wg.Wait()
	return out
}

// probe returns the median time of GET /healthz on c, or the first
// failure.
func (rc *regionChooser) probe(ctx context.Context, c *codersdk.Client) (time.Duration, error) {
	n, timeout := rc.probes, rc.probeTimeout
	if n <= 0 {
		n = regionProbes
	}
	if timeout <= 0 {
		timeout = regionProbeTimeout
	}
	samples := make([]time.Duration, 0, n)
	for range n {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		resp, err := c.Request(pctx, http.MethodGet, "/healthz", nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10))
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("GET /healthz: %s", resp.Status)
			}
		}
		elapsed := time.Since(start)
		cancel()
		if err != nil {
			return 0, err
		}
		samples = append(samples, elapsed)
	}
	slices.Sort(samples)
	return samples[len(samples)/2], nil
}

// regionCache is regionCacheFile: per deployment (its URL as the CLI
// reaches it), the region "auto" chose and when.
type regionCache struct {
	Deployments map[string]regionCacheEntry `json:"deployments"`
}

type regionCacheEntry struct {
	Region   string    `json:"region"`
	URL      string    `json:"url"`
	ChosenAt time.Time `json:"chosen_at"`
}

// fresh reports whether e is usable at now.
func (e regionCacheEntry) fresh(now time.Time) bool {
	age := now.Sub(e.ChosenAt)
	return e.Region != "" && age >= 0 && age < regionCacheTTL
}

// load reads the cache; a missing or corrupt one is empty.
func (rc *regionChooser) load() regionCache {
	c := regionCache{Deployments: map[string]regionCacheEntry{}}
	if rc.cachePath == "" {
		return c
	}
	b, err := os.ReadFile(rc.cachePath)
	if err != nil {
		return c
	}
	if err := json.Unmarshal(b, &c); err != nil || c.Deployments == nil {
		rc.log.Debug("ignore the corrupt region cache", "file", rc.cachePath, "error", err)
		return regionCache{Deployments: map[string]regionCacheEntry{}}
	}
	return c
}

// save writes the cache, dropping stale entries. A cache that cannot be
// written costs a measurement next time, nothing more.
func (rc *regionChooser) save(c regionCache) {
	now := rc.now()
	for k, e := range c.Deployments {
		if !e.fresh(now) {
			delete(c.Deployments, k)
		}
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err == nil {
		if err = os.MkdirAll(filepath.Dir(rc.cachePath), 0o700); err == nil {
			err = atomicfile.Write(rc.cachePath, append(b, '\n'), 0o600)
		}
	}
	if err != nil {
		rc.log.Debug("write the region cache", "file", rc.cachePath, "error", err)
	}
}

func (rc *regionChooser) key() string { return rc.client.URL.String() }

// remembered returns the fresh remembered choice for this deployment.
func (rc *regionChooser) remembered() (codersdk.Region, bool) {
	e, ok := rc.load().Deployments[rc.key()]
	if !ok || !e.fresh(rc.now()) {
		return codersdk.Region{}, false
	}
	if e.Region != regionPrimary {
		if u, err := url.Parse(e.URL); err != nil || u.Host == "" {
			return codersdk.Region{}, false
		}
	}
	return codersdk.Region{Name: e.Region, Healthy: true, PathAppURL: e.URL}, true
}

// remember stores the choice for this deployment.
func (rc *regionChooser) remember(reg codersdk.Region) {
	if rc.cachePath == "" {
		return
	}
	c := rc.load()
	c.Deployments[rc.key()] = regionCacheEntry{Region: reg.Name, URL: reg.PathAppURL, ChosenAt: rc.now()}
	rc.save(c)
}

// forget drops this deployment's remembered choice when it is region.
func (rc *regionChooser) forget(region string) {
	if rc.cachePath == "" {
		return
	}
	c := rc.load()
	if e, ok := c.Deployments[rc.key()]; !ok || e.Region != region {
		return
	}
	delete(c.Deployments, rc.key())
	rc.save(c)
}

// agentRoute is where a command's relay connections go: the primary, or a
// workspace proxy until a dial through it fails for the proxy's sake.
type agentRoute struct {
	primary *codersdk.Client
	// proxy is the proxy's client (nil: the primary serves), proxyName
	// its region's name.
	proxy     *codersdk.Client
	proxyName string
	// warn gets the line that says the proxy failed.
	warn io.Writer
	// onFallBack runs once, when the route falls back (forgets the
	// remembered choice).
	onFallBack func()

	mu        sync.Mutex
	fellBack  bool
	noPrepare bool // the proxy refused prepared connections (400)
}

// activeProxy is the proxy's client while the route uses it.
func (r *agentRoute) activeProxy() *codersdk.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fellBack {
		return nil
	}
	return r.proxy
}

// client is the client connections go through now.
func (r *agentRoute) client() *codersdk.Client {
	if p := r.activeProxy(); p != nil {
		return p
	}
	return r.primary
}

// via names the way connections go now, for messages.
func (r *agentRoute) via() string {
	if r.activeProxy() != nil {
		return fmt.Sprintf("workspace proxy %s", r.proxyName)
	}
	return "coderd's relay"
}

// canPrepare reports whether c takes prepared connections
// (codersdk.PreparedConn): the primary does; a proxy until it refused one.
func (r *agentRoute) canPrepare(c *codersdk.Client) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return c != r.proxy || !r.noPrepare
}

// preparedRefused notes a refusal of a prepared connection on c: a proxy
// that answers 400 does not take them, and gets plain connects from then
// on. It reports whether that was the case.
func (r *agentRoute) preparedRefused(c *codersdk.Client, err error) bool {
	if c != r.proxy || !codersdk.IsStatus(err, http.StatusBadRequest) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noPrepare = true
	return true
}

// dial opens a relay connection with dial: through the proxy while the
// route uses one, else (or when the proxy fails) through the primary. See
// classifyProxyDialError for what counts as the proxy failing.
func (r *agentRoute) dial(ctx context.Context, dial func(context.Context, *codersdk.Client) (net.Conn, error)) (net.Conn, error) {
	proxy := r.activeProxy()
	if proxy == nil {
		return dial(ctx, r.primary)
	}
	pctx, cancel := context.WithTimeout(ctx, proxyDialTimeout)
	conn, err := dial(pctx, proxy)
	cancel()
	if err == nil || ctx.Err() != nil {
		return conn, err
	}
	switch classifyProxyDialError(err) {
	case proxyRefused:
		return nil, err
	case proxyFailed:
		r.fallBack(err)
		return dial(ctx, r.primary)
	}
	// A 5xx answer: the proxy's relay may be down, or the agent is away
	// or refused the port, which the primary would say too. The primary's
	// answer tells which.
	conn, perr := dial(ctx, r.primary)
	if perr != nil {
		return nil, perr
	}
	r.fallBack(err)
	return conn, nil
}

// fallBack switches the route to the primary, once, saying why.
func (r *agentRoute) fallBack(err error) {
	r.mu.Lock()
	already := r.fellBack
	r.fellBack = true
	r.mu.Unlock()
	if already {
		return
	}
	fmt.Fprintf(r.warn, "coder: workspace proxy %q is unreachable (%s); connecting through the primary\n", r.proxyName, proxyErrorSummary(err))
	if r.onFallBack != nil {
		r.onFallBack()
	}
}

// proxyErrorSummary is the part of a failed dial through a proxy worth a
// line: the network error (e.g. "dial tcp 10.0.0.5:443: connect:
// connection refused") rather than the request around it, else the whole
// error.
func proxyErrorSummary(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return oneLine(opErr)
	}
	return oneLine(err)
}

// proxyDialVerdict is what a failed dial through a proxy means.
type proxyDialVerdict int

const (
	// proxyRefused: a refusal the primary would give too (bad token, no
	// access, no such agent, an old build, a bad request): report it.
	proxyRefused proxyDialVerdict = iota
	// proxyFailed: the proxy itself failed (refused the TCP connection,
	// timed out, failed TLS, does not serve the relay): use the primary.
	proxyFailed
	// proxyAskPrimary: a 5xx answer, which the proxy gives when its relay
	// to the primary is down and the primary gives when the agent is away
	// or refused the port: the primary's own answer decides.
	proxyAskPrimary
)

func (v proxyDialVerdict) String() string {
	switch v {
	case proxyRefused:
		return "refused"
	case proxyFailed:
		return "failed"
	case proxyAskPrimary:
		return "ask the primary"
	}
	return fmt.Sprintf("proxyDialVerdict(%d)", int(v))
}

// classifyProxyDialError says what err, from a dial through a workspace
// proxy, means. An API answer (*codersdk.Error) of 5xx is the proxy's or
// the agent's doing; a 404 saying the proxy does not serve the route comes
// from a proxy without the relay; other 4xx are refusals the primary
// gives too. Anything that is not an answer (connection refused, reset,
// DNS, TLS, a timeout, an upgrade something in between refused) is the
// proxy failing; the caller's own cancellation is reported.
func classifyProxyDialError(err error) proxyDialVerdict {
	var apiErr *codersdk.Error
	switch {
	case errors.Is(err, context.Canceled):
		return proxyRefused
	case errors.As(err, &apiErr):
		switch {
		case apiErr.StatusCode >= 500:
			return proxyAskPrimary
		case apiErr.StatusCode == http.StatusNotFound && strings.Contains(apiErr.Message, "not served by a workspace proxy"):
			return proxyFailed
		}
		return proxyRefused
	}
	return proxyFailed
}
