package appliance

// The proxy role
//
// An appliance with `role: proxy` in appliance.yaml (or started with
// `coder appliance up --proxy`) is a workspace proxy of a primary's
// deployment, installed from the same bundle as the primary: it runs
// package wsproxy and nothing else. No PostgreSQL, no provisioners, no
// coderd and no mirror (a region without provisioners fetches no
// providers or images; a region that runs its own provisioner points it at
// a folder of the installed release, DIR/current/providers, or at a mirror
// of its own, `coder mirror serve --dir DIR`).
//
// Up's steps for it (proxySteps): the egress guard (loopback, hosts, the
// proxy's own names and the primary's host), the appliance CA and a
// serving certificate for hosts, as the primary's, the primary's trust
// (trust.pem plus primary-ca-file), the token (proxy-session-token-file,
// or proxy-session-token), the proxy itself on tls-address (HTTPS, ready
// once the primary accepted its registration), the plain HTTP redirect on
// http-address, and the systemd watchdog. The proxy is not restarted in
// place: one that stops (the primary refused its token, its listener
// failed) ends Up with its error, and systemd restarts the appliance.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"airgapcoder/certs"
	"airgapcoder/internal/buildinfo"
	"airgapcoder/internal/lifecycle"
	"airgapcoder/wsproxy"
)

// Roles of an appliance (appliance.yaml's role).
const (
	// RolePrimary runs the deployment: PostgreSQL, the mirror, coderd and
	// its provisioners.
	RolePrimary = "primary"
	// RoleProxy runs a workspace proxy of a primary's deployment, and
	// nothing else.
	RoleProxy = "proxy"
)

// proxyOnlyKeys are the keys only role: proxy takes.
var proxyOnlyKeys = []string{"primary-access-url", "proxy-session-token", "proxy-session-token-file", "primary-ca-file"}

// primaryOnlyKeys are the keys of what a proxy does not run; a proxy's
// config leaves them at their defaults.
var primaryOnlyKeys = []string{
	"mirror-address", "provisioner-daemons", "postgres-url", "prometheus-enable", "prometheus-address",
	"oidc-issuer-url", "oidc-client-id", "oidc-client-secret", "oidc-client-secret-file", "oidc-email-domain",
	"oidc-scopes", "oidc-allow-signups", "oidc-username-field", "oidc-email-field", "oidc-ignore-email-verified",
	"oidc-sign-in-text", "oidc-icon-url", "oidc-group-field", "oidc-group-mapping", "oidc-group-auto-create",
	"oidc-group-regex-filter", "oidc-allowed-groups", "oidc-user-role-field", "oidc-user-role-mapping",
	"disable-password-auth", "external-auth",
}

// IsProxy reports whether the appliance runs as a workspace proxy.
func (c Config) IsProxy() bool { return c.Role == RoleProxy }

// validateRole checks role and the keys that go with it: a proxy needs the
// primary's URL and its token, and refuses what only a primary runs (it
// would be ignored); a primary refuses the proxy's keys.
func (c Config) validateRole() error {
	switch c.Role {
	case RolePrimary:
		if set := c.changedKeys(proxyOnlyKeys); len(set) > 0 {
			return fmt.Errorf("%s: only a workspace proxy uses them: set role: proxy, or remove them", strings.Join(set, ", "))
		}
		return nil
	case RoleProxy:
	default:
		return fmt.Errorf("role %q: want %s (the default) or %s", c.Role, RolePrimary, RoleProxy)
	}
	var errs []error
	if set := c.changedKeys(primaryOnlyKeys); len(set) > 0 {
		errs = append(errs, fmt.Errorf("%s: role: proxy runs no PostgreSQL, mirror, coderd or provisioners, so these would be ignored: remove them (they belong in the primary's appliance.yaml)",
			strings.Join(set, ", ")))
	}
	if c.PrimaryAccessURL == "" {
		errs = append(errs, errors.New("primary-access-url is required with role: proxy: set it to the primary's access URL, e.g. https://coder.example.internal"))
	} else if u, err := url.Parse(c.PrimaryAccessURL); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		errs = append(errs, fmt.Errorf("primary-access-url %q: want the primary's https access URL, e.g. https://coder.example.internal", c.PrimaryAccessURL))
	}
	switch {
	case c.ProxySessionToken == "" && c.ProxySessionTokenFile == "":
		errs = append(errs, errors.New("proxy-session-token-file is required with role: proxy: write the token coder wsproxy create printed to a file only the service user reads (mode 0600) and name it here"))
	case c.ProxySessionToken != "" && c.ProxySessionTokenFile != "":
		errs = append(errs, errors.New("proxy-session-token and proxy-session-token-file are both set: keep only proxy-session-token-file"))
	case c.ProxySessionToken != "":
		if err := checkProxyToken(c.ProxySessionToken); err != nil {
			errs = append(errs, fmt.Errorf("proxy-session-token: %w", err))
		}
	}
	return errors.Join(errs...)
}

// changedKeys are those of keys whose values differ from DefaultConfig's
// (an empty list counts as its default when that is empty too).
func (c Config) changedKeys(keys []string) []string {
	def := reflect.ValueOf(DefaultConfig())
	got := reflect.ValueOf(c)
	var out []string
	for i := range got.NumField() {
		key := got.Type().Field(i).Tag.Get("koanf")
		if !slices.Contains(keys, key) {
			continue
		}
		a, b := got.Field(i), def.Field(i)
		if a.Kind() == reflect.Slice && a.Len() == 0 && b.Len() == 0 {
			continue
		}
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			out = append(out, key)
		}
	}
	return out
}

// checkProxyToken checks the form of a proxy's token, "<id>:<secret>",
// without saying anything of its value.
func checkProxyToken(token string) error {
	id, secret, ok := strings.Cut(token, ":")
	if !ok || id == "" || secret == "" || strings.ContainsAny(token, " \t\r\n") {
		return errors.New("it is not a proxy token (<id>:<secret>, as coder wsproxy create prints it)")
	}
	return nil
}

// primaryHosts is the primary's host for a proxy (none for a primary):
// naming the primary allows the proxy to reach it.
func (c Config) primaryHosts() []string {
	u, err := url.Parse(c.PrimaryAccessURL)
	if !c.IsProxy() || err != nil || u.Hostname() == "" {
		return nil
	}
	return []string{strings.ToLower(u.Hostname())}
}

// proxySteps is the proxy role's start-up, in order; the stop runs in
// reverse.
func (u *upRun) proxySteps() []lifecycle.Step {
	return []lifecycle.Step{
		{Name: "guard egress", Run: u.guardEgress},
		{Name: "certificates", Run: u.ensureServerCertificate}, // as the primary's, without the agents' CAs
		{Name: "trust the primary", Run: u.trustPrimary},
		{Name: "read the proxy token", Run: u.readProxyToken},
		{Name: "start workspace proxy", Run: u.startProxy},
		{Name: "serve plain HTTP redirects", Run: u.startProxyRedirect},
		{Name: "start watchdog", Run: u.startProxyWatchdog},
	}
}

// trustPrimary builds the client that reaches the primary: it trusts
// trust.pem and primary-ca-file, and dials through the egress guard.
func (u *upRun) trustPrimary(context.Context) error {
	pool := u.trust.Pool()
	if f := u.cfg.PrimaryCAFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("primary-ca-file: %w; copy the primary's certs/ca.pem here, readable by the user that runs the appliance", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("primary-ca-file %s holds no PEM certificate: want the primary's certs/ca.pem (or the CA that issued its certificate)", f)
		}
	}
	t := u.trust.Transport()
	t.TLSClientConfig.RootCAs = pool
	u.primaryClient = &http.Client{Transport: u.guard.Wrap(t)}
	return nil
}

// readProxyToken reads proxy-session-token-file (or takes
// proxy-session-token). The file must not be readable by others; the
// token is never logged.
func (u *upRun) readProxyToken(context.Context) error {
	if u.cfg.ProxySessionTokenFile == "" {
		u.proxyToken = u.cfg.ProxySessionToken
		return nil
	}
	token, err := readSecretFile(u.cfg.ProxySessionTokenFile)
	if err != nil {
		return fmt.Errorf("proxy-session-token-file: %w", err)
	}
	if err := checkProxyToken(token); err != nil {
		return fmt.Errorf("proxy-session-token-file %s: %w", u.cfg.ProxySessionTokenFile, err)
	}
	u.proxyToken = token
	return nil
}

// readSecretFile reads a secret (surrounding white space trimmed) from
// path, which others may not read or write.
func readSecretFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if perm := st.Mode().Perm(); perm&0o007 != 0 {
		return "", fmt.Errorf("%s has mode %04o, readable or writable by every user of the host: chmod 600 %s", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrPermission) {
		name := strconv.Itoa(os.Geteuid())
		if me, err := user.Current(); err == nil {
			name = me.Username
		}
		return "", fmt.Errorf("%w: the appliance runs as %s: make %s its own (chown %s %s; mode 0600)", err, name, path, name, path)
	}
	if err != nil {
		return "", err
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return secret, nil
}

// startProxy runs the workspace proxy on tls-address, over HTTPS with the
// serving certificate, until the stop; it is ready once the primary has
// accepted its registration (retried with backoff while the primary is
// not up). From then on a proxy that stops ends Up.
func (u *upRun) startProxy(ctx context.Context) error {
	cert, err := certs.LoadServerCertificate(u.dir)
	if err != nil {
		return err
	}
	primary, err := url.Parse(u.cfg.PrimaryAccessURL)
	if err != nil {
		return fmt.Errorf("primary-access-url: %w", err)
	}
	access, err := url.Parse(u.cfg.accessURL())
	if err != nil {
		return fmt.Errorf("access-url: %w", err)
	}
	srv, err := wsproxy.New(wsproxy.Options{
		PrimaryAccessURL: primary, ProxySessionToken: u.proxyToken, AccessURL: access, WildcardAccessURL: u.cfg.WildcardAccessURL,
		HTTPAddress: u.cfg.TLSAddress, TLSCertificate: &cert, HTTPClient: u.primaryClient,
		Version: buildinfo.Version(), Logger: u.log.With("component", "wsproxy"),
	})
	if err != nil {
		return err
	}
	u.log.Info("registering with the primary", "primary", primary.String(), "access_url", access.String())
	if err := u.runUntilReady(ctx, "workspace proxy", srv); err != nil {
		return err
	}
	u.proxy = srv
	return nil
}

// startProxyRedirect serves http-address (unless it is ""): every request
// is redirected (308) to the same path on the proxy's access URL (an app
// host to itself over https), /healthz excepted, which the proxy answers.
func (u *upRun) startProxyRedirect(ctx context.Context) error {
	if u.cfg.HTTPAddress == "" {
		return nil
	}
	target, err := url.Parse(u.cfg.accessURL())
	if err != nil {
		return fmt.Errorf("access-url: %w", err)
	}
	apps, err := u.cfg.wildcard()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", u.cfg.HTTPAddress)
	if err != nil {
		return fmt.Errorf("listen on http-address %s: %w", u.cfg.HTTPAddress, err)
	}
	base := strings.TrimSuffix(target.String(), "/")
	health := u.proxy.Handler()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				health.ServeHTTP(w, r)
				return
			}
			host := r.Host
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
			if sub, ok := apps.Match(r.Host); ok && !strings.EqualFold(host, target.Hostname()) {
				http.Redirect(w, r, "https://"+apps.Host(sub, target)+r.URL.RequestURI(), http.StatusPermanentRedirect)
				return
			}
			http.Redirect(w, r, base+r.URL.RequestURI(), http.StatusPermanentRedirect)
		}),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	u.stop.Push("plain HTTP redirects", func(ctx context.Context) error {
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	u.log.Info("plain HTTP redirects to the access URL", "address", ln.Addr().String(), "access_url", base)
	return nil
}

// startProxyWatchdog feeds systemd's watchdog while the proxy's /healthz
// passes (it is registered), when the unit asks for one.
func (u *upRun) startProxyWatchdog(ctx context.Context) error {
	client := &http.Client{Transport: localTransport(u.trust, u.cfg.AccessHost()), Timeout: 5 * time.Second}
	local := "https://" + loopbackAddr(u.proxy.Addr().String()) + "/healthz"
	u.watch(ctx, func(ctx context.Context) error { return getHealthz(ctx, client, "workspace proxy /healthz", local) })
	return nil
}

// proxyStatus is what `coder appliance status` shows of a proxy: its
// /healthz (registered with the primary or not) and its own health report.
func proxyStatus(ctx context.Context, cfg Config, trust *certs.Store) Component {
	c := Component{Name: "wsproxy", State: "down"}
	client := &http.Client{Timeout: 3 * time.Second}
	if trust != nil {
		client.Transport = localTransport(trust, cfg.AccessHost())
	}
	local := "https://" + loopbackAddr(cfg.TLSAddress)
	get := func(path string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, local+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, strings.TrimSpace(b.String()), nil
	}
	code, body, err := get("/healthz")
	switch {
	case err != nil:
		c.Detail = err.Error()
		return c
	case code == http.StatusServiceUnavailable:
		c.State, c.Detail = "starting", fmt.Sprintf("%s: %s (primary %s)", cfg.accessURL(), body, cfg.PrimaryAccessURL)
		return c
	case code != http.StatusOK:
		c.Detail = fmt.Sprintf("%s/healthz answered %d: %s", cfg.accessURL(), code, body)
		return c
	}
	c.State, c.Detail = "ok", fmt.Sprintf("%s, registered with the primary %s", cfg.accessURL(), cfg.PrimaryAccessURL)
	if code, body, err := get("/healthz-report"); err == nil && code == http.StatusOK {
		var report struct {
			Errors   []string `json:"errors"`
			Warnings []string `json:"warnings"`
		}
		if json.Unmarshal([]byte(body), &report) == nil {
			if len(report.Errors) > 0 {
				c.State = "unhealthy"
				c.Detail += "; errors: " + strings.Join(report.Errors, "; ")
			}
			if len(report.Warnings) > 0 {
				c.Detail += "; warnings: " + strings.Join(report.Warnings, "; ")
			}
		}
	}
	return c
}
