package appliance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coder/quartz"
	"github.com/thejerf/suture/v4"

	"airgapcoder/bundle"
	"airgapcoder/certs"
	"airgapcoder/codersdk"
	"airgapcoder/controlplane"
	"airgapcoder/internal/buildinfo"
	"airgapcoder/internal/egress"
	"airgapcoder/internal/lifecycle"
	"airgapcoder/internal/logring"
	"airgapcoder/internal/templatetar"
	"airgapcoder/mirror"
	"airgapcoder/terraform"
	"airgapcoder/wsproxy"

	"airgapcoder/internal/atomicfile"
)

// UpOptions configure Up.
type UpOptions struct {
	Dir string
	// Overrides are settings from the command line (yaml key -> value).
	Overrides map[string]any
	Logger    *slog.Logger
	// Ready, when set, is closed once every component is ready.
	Ready chan<- struct{}
	// RecentLogs, when set, is the ring Logger's handler keeps its newest
	// lines in (package internal/logring); coderd serves it to owners for
	// `coder support bundle`.
	RecentLogs *logring.Ring
}

// Up runs the current release as one supervised process tree until ctx is
// canceled. It starts, in this order (the steps of [upRun.steps]):
//
//  1. the egress guard: the product's clients reach only the appliance's
//     own names and egress-allow;
//  2. the certificates in DIR/certs (the appliance CA and a serving
//     certificate for every name);
//  3. the supervision tree the restartable components run in;
//  4. the bundled PostgreSQL (as the service user, data in DIR/data), or
//     nothing when postgres-url names an external server;
//  5. the mirror (providers, modules and images over HTTPS);
//  6. the container runtimes' trust in the mirror's registry;
//  7. workspace launch through the launcher, as the owners' accounts;
//  8. the control plane (package controlplane: coderd with telemetry and
//     update checks off, every workspace connection relayed) and its
//     built-in provisioners running the bundled terraform against the
//     bundled providers;
//  9. systemd's watchdog, fed while /healthz passes.
//
// Each step waits for the one before to be ready; a step that fails stops what the steps before it started,
// in reverse, and Up returns its error naming the step. PostgreSQL and the
// mirror are supervised (supervise.go): restarted when they crash or hang,
// and Up returns an error naming one that keeps failing, so that systemd
// restarts the whole appliance. So does a control plane that stops.
//
// With role: proxy it runs [upRun.proxySteps] instead: a workspace proxy
// of the primary and nothing else (proxy.go).
func Up(ctx context.Context, opts UpOptions) (err error) {
	u, err := newUpRun(opts)
	if err != nil {
		return err
	}
	defer func() {
		_ = notifySystemd("STOPPING=1")
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, u.stop.Stop(stopCtx))
	}()
	// Components that fail after their step report here.
	u.failed = make(chan error, 2)
	steps := u.steps()
	if u.cfg.IsProxy() {
		steps = u.proxySteps() // proxy.go: the proxy and nothing else
	}
	for i, step := range steps {
		// systemd shows what the appliance is doing (systemctl status).
		steps[i].Run = func(ctx context.Context) error {
			_ = notifySystemd("STATUS=starting: " + step.Name)
			return step.Run(ctx)
		}
	}
	if err := lifecycle.Start(ctx, u.log, steps); err != nil || ctx.Err() != nil {
		return err
	}
	serving := u.cfg.accessURL()
	if u.cfg.IsProxy() {
		u.log.Info("the workspace proxy is ready: registered with the primary", "url", serving, "primary", u.cfg.PrimaryAccessURL,
			"ca_file", filepath.Join(u.l.Certs(), certs.CAFile))
	} else {
		serving = u.srv.AccessURL().String()
		caFile := filepath.Join(u.l.Certs(), certs.CAFile)
		if u.issued.CA == nil {
			caFile = u.agentCA // a site certificate: its CA is among the imported ones
		}
		u.log.Info("the appliance is ready", "url", serving, "mirror", "https://"+u.registry, "ca_file", caFile,
			"first_user", fmt.Sprintf("coder login %s --ca-file %s --first-user-username admin --first-user-email admin@example.com --first-user-password ...", serving, caFile))
	}
	if opts.Ready != nil {
		close(opts.Ready)
	}
	// systemd (Type=notify) hears READY=1 only now that every part serves.
	if err := notifySystemd("READY=1\nSTATUS=serving " + serving); err != nil {
		u.log.Warn("tell systemd the appliance is ready", "err", err)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-u.failed:
		// systemd restarts the whole appliance (Restart=on-failure).
		u.log.Error("stopping the appliance: a component failed", "err", err)
		return err
	}
}

// upRun is one run of Up: what the steps have built so far.
type upRun struct {
	opts     UpOptions
	log      *slog.Logger
	dir      string
	l        Layout
	cfg      Config
	rel      string
	m        bundle.Manifest
	platform string
	stop     lifecycle.Stack
	// failed receives the error of a component that stopped for good.
	failed chan error

	tree           *suture.Supervisor
	hosts          []string
	guard          *egress.Guard
	issued         certs.GenerateResult
	trust          *certs.Store
	agentCA        string
	pgURL          string
	mirror         *mirrorService
	registry       string // the mirror's host:port as templates name it
	mirrorLocal    string // its https URL on this host
	mirrorProbe    *http.Client
	provisionerEnv map[string]string
	srv            *controlplane.Server
	localClient    *codersdk.Client
	// apiReady is closed once localClient is set.
	apiReady chan struct{}

	// The proxy role's parts (proxy.go).
	primaryClient *http.Client
	proxyToken    string
	proxy         *wsproxy.Server
}

// newUpRun reads what Up runs: the configuration and the current release.
func newUpRun(opts UpOptions) (*upRun, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	l := Layout{Dir: dir}
	cfg, err := LoadConfig(dir, opts.Overrides)
	if err != nil {
		return nil, err
	}
	release, err := l.CurrentRelease()
	if err != nil {
		return nil, err
	}
	if release == "" {
		return nil, fmt.Errorf("nothing is installed in %s: run coder appliance install BUNDLE --dir %s first", dir, dir)
	}
	rel := l.Release(release)
	m, err := readManifest(rel)
	if err != nil {
		return nil, err
	}
	log = log.With("release", release)
	log.Info("starting the appliance", "bundle", m.Name, "dir", dir, "role", cfg.Role)
	return &upRun{opts: opts, log: log, dir: dir, l: l, cfg: cfg, rel: rel, m: m, platform: runtime.GOOS + "/" + runtime.GOARCH,
		stop: lifecycle.Stack{Log: log}, apiReady: make(chan struct{})}, nil
}

// steps is the start-up, in order; the stop runs in reverse.
func (u *upRun) steps() []lifecycle.Step {
	return []lifecycle.Step{
		{Name: "guard egress", Run: u.guardEgress},
		{Name: "certificates", Run: u.ensureCertificates},
		{Name: "start supervision", Run: u.startSupervision},
		{Name: "start postgres", Run: u.startPostgres},
		{Name: "start mirror", Run: u.startMirror},
		{Name: "trust the mirror for containers", Run: u.trustMirror},
		{Name: "prepare workspace launch", Run: u.prepareWorkspaces},
		{Name: "start control plane", Run: u.startControlPlane},
		{Name: "start watchdog", Run: u.startWatchdog},
	}
}

// guardEgress installs the egress guard: the product's HTTP clients reach
// only the names the appliance is reached or advertised by (a wildcard
// listen address is advertised by the first of hosts) and egress-allow.
func (u *upRun) guardEgress(context.Context) error {
	if err := os.MkdirAll(u.l.Run(), 0o755); err != nil {
		return err
	}
	cfg := u.cfg
	hosts := append([]string{"localhost", "127.0.0.1", "::1"}, cfg.Hosts...)
	addrs := []string{cfg.TLSAddress, cfg.HTTPAddress}
	if !cfg.IsProxy() {
		addrs = append(addrs, cfg.MirrorAddress) // a proxy runs no mirror
	}
	for _, addr := range addrs {
		if h := cfg.AdvertisedHost(addr); h != "" {
			hosts = append(hosts, h)
		}
	}
	if w, _ := cfg.wildcard(); !w.IsZero() {
		hosts = append(hosts, w.CertificateName()) // subdomain apps
	}
	u.hosts = dedupe(append(hosts, cfg.AccessHost()))
	guard, err := egress.New(append(slices.Clone(u.hosts), cfg.EgressAllow...), u.log.With("component", "egress"))
	if err != nil {
		return err
	}
	_ = os.Remove(u.l.egressReport())
	_ = os.Remove(u.l.restartReport())
	guard.OnRefuse(func(addr string, total int64) {
		if err := recordRefusal(u.l, addr, total, time.Now()); err != nil {
			u.log.Warn("record a refused connection", "err", err)
		}
	})
	guard.Install()
	u.guard = guard
	return nil
}

// ensureCertificates issues (or keeps) the appliance CA and a serving
// certificate for every name of u.hosts, loads trust.pem, and writes the
// CAs agents trust.
func (u *upRun) ensureCertificates(ctx context.Context) error {
	if err := u.ensureServerCertificate(ctx); err != nil {
		return err
	}
	var err error
	u.agentCA, err = writeAgentCA(u.l)
	return err
}

// ensureServerCertificate issues (or keeps) the appliance CA and a serving
// certificate for every name of u.hosts, and loads trust.pem: the whole of
// a proxy's certificates step.
func (u *upRun) ensureServerCertificate(context.Context) error {
	issued, err := certs.EnsureServer(u.dir, u.hosts, certs.Options{})
	if err != nil {
		return err
	}
	if err := checkAdvertisedNames(issued.Server, u.cfg); err != nil {
		return err
	}
	u.issued = issued
	u.trust, err = certs.Load(u.dir)
	return err
}

// startSupervision starts the tree the restartable components run in. A
// component that keeps failing ends it, and Up with it.
func (u *upRun) startSupervision(ctx context.Context) error {
	u.tree = newSupervisionTree(u.log.With("component", "supervisor"))
	treeCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := u.tree.ServeBackground(treeCtx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := <-done; err != nil && treeCtx.Err() == nil {
			u.failed <- err
		}
	}()
	u.stop.Push("supervision", func(context.Context) error {
		cancel()
		<-stopped
		return nil
	})
	return nil
}

// supervise adds c to the tree. Its supervision ends before whatever the
// steps pushed earlier stops (a component being stopped is no failure).
func (u *upRun) supervise(c *supervised) {
	token := u.tree.Add(c)
	u.stop.Push("supervision of "+c.name, func(context.Context) error {
		err := u.tree.RemoveAndWait(token, 30*time.Second)
		if errors.Is(err, suture.ErrSupervisorNotRunning) {
			return nil
		}
		return err
	})
}

// onRestart tells systemd and `coder appliance status` of a restart.
func (u *upRun) onRestart(component string) func(int, error) {
	return func(n int, cause error) {
		_ = notifySystemd(fmt.Sprintf("STATUS=restarting %s (restart %d): %v", component, n, cause))
		if err := recordRestart(u.l, component, n, cause, time.Now()); err != nil {
			u.log.Warn("record a restart", "err", err)
		}
	}
}

// startPostgres starts PostgreSQL from the bundle's binaries as the
// service user, unless postgres-url names an external server, and
// supervises it.
func (u *upRun) startPostgres(ctx context.Context) error {
	pgURL, err := postgresTrusting(u.cfg.PostgresURL, u.trust.CertFile())
	if err != nil {
		return err
	}
	if pgURL != "" {
		u.pgURL = pgURL
		return nil
	}
	if u.m.Components.Postgres == nil {
		return errors.New("this bundle carries no PostgreSQL and postgres-url is not set")
	}
	pg, err := newPostgres(u.l, u.cfg, u.m, u.rel, u.log)
	if err != nil {
		return err
	}
	if err := pg.Start(ctx); err != nil {
		return fmt.Errorf("data in %s: %w", u.l.Postgres(), err)
	}
	u.stop.Push("postgres", func(ctx context.Context) error {
		_ = os.Remove(u.l.postgresInfo())
		return pg.Stop(ctx)
	})
	if err := writePostgresInfo(u.l, pg); err != nil {
		return err
	}
	u.pgURL = pg.URL()
	u.supervise(superviseServer("postgres", pg, quartz.NewReal(), u.log.With("component", "supervisor"), u.onRestart("postgres")))
	return nil
}

// startMirror serves the release's providers, modules and images over
// HTTPS, supervised, and waits until it serves.
func (u *upRun) startMirror(ctx context.Context) error {
	cert, err := certs.LoadServerCertificate(u.dir)
	if err != nil {
		return err
	}
	ms, err := newMirrorService(mirror.ServerOptions{
		Dir: u.dir, Certificate: cert, ProvidersDir: filepath.Join(u.rel, bundle.DirProviders), ImagesDir: filepath.Join(u.rel, bundle.DirImages),
		ModulesDir: filepath.Join(u.rel, bundle.DirModules),
		Address:    u.cfg.MirrorAddress, Logger: u.log.With("component", "mirror"),
	})
	if err != nil {
		return err
	}
	first := ms.server()
	u.supervise(newSupervised("mirror", ms.serve, ms.restart, quartz.NewReal(), u.log.With("component", "supervisor"), u.onRestart("mirror")))
	select {
	case <-first.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	u.mirror = ms
	// Advertised by name, probed on this host (loopback for a wildcard
	// address) and verified as that name.
	u.registry = servedRegistry(first.Addr(), u.cfg)
	registryHost, _, _ := net.SplitHostPort(u.registry)
	u.mirrorProbe = &http.Client{Transport: u.guard.Wrap(localTransport(u.trust, registryHost)), Timeout: 5 * time.Second}
	u.mirrorLocal = "https://" + loopbackAddr(first.Addr().String())
	u.log.Info("mirror ready", "url", "https://"+u.registry)
	return nil
}

// trustMirror makes the container runtimes trust the mirror's registry.
func (u *upRun) trustMirror(context.Context) error {
	_, err := trustForContainers(u.log, u.registry, u.agentCA, containerCertDirs(u.l))
	return err
}

// prepareWorkspaces sets up how workspaces of the process template start:
// through the launcher, as their owners' accounts (serviceuser.go).
func (u *upRun) prepareWorkspaces(context.Context) error {
	env, err := workspaceEnvironment(u.l, u.rel, u.platform, u.log)
	u.provisionerEnv = env
	return err
}

// mirrorHealth is the mirror's part of /healthz.
func (u *upRun) mirrorHealth(ctx context.Context) error {
	return getHealthz(ctx, u.mirrorProbe, "mirror /healthz", u.mirrorLocal+"/healthz")
}

// getHealthz asks url, a /healthz, with client, and fails unless it
// answers 200 OK; what names it in the error.
func getHealthz(ctx context.Context, client *http.Client, what, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", what, resp.Status)
	}
	return nil
}

// startControlPlane runs coderd with its built-in provisioners over HTTPS
// with the appliance certificate (plain HTTP only redirects), and waits
// until it serves. Its local client (bundled templates, the watchdog)
// dials this host and verifies the access URL's name.
func (u *upRun) startControlPlane(ctx context.Context) error {
	cfg, l, rel := u.cfg, u.l, u.rel
	tf := ""
	tfVersion := terraform.DefaultVersion
	if u.m.Components.Terraform != nil {
		tfVersion = u.m.Components.Terraform.Version
		tf = filepath.Join(rel, bundle.TerraformPath(u.platform))
	}
	srv, err := controlplane.New(controlplane.Config{
		HTTPAddress: cfg.HTTPAddress, AccessURL: cfg.AccessURL, WildcardAccessURL: cfg.WildcardAccessURL, PostgresURL: u.pgURL,
		Prometheus:    controlplane.PrometheusConfig{Enable: cfg.PrometheusEnable, Address: cfg.PrometheusAddress},
		AdvertiseHost: cfg.AdvertisedHost(cfg.TLSAddress),
		TLS: controlplane.TLSConfig{
			Enable: true, Address: cfg.TLSAddress,
			CertFile: filepath.Join(u.l.Certs(), certs.ServerFile), KeyFile: filepath.Join(u.l.Certs(), certs.ServerKeyFile),
			StrictTransportSecurity: 365 * 24 * 3600,
		},
		ConfigDir: l.Data(), CacheDir: l.Cache(),
		ProvisionerDaemons: cfg.ProvisionerDaemons,
		Provisioner: controlplane.ProvisionerConfig{
			Terraform:       terraform.Options{Path: tf, Version: tfVersion},
			ProviderMirror:  filepath.Join(rel, bundle.DirProviders),
			ModuleMirror:    u.mirrorLocal + mirror.ModulesPath,
			CACertFile:      u.trust.CertFile(),
			AgentCACertFile: u.agentCA,
			WorkDir:         filepath.Join(l.Cache(), "provisionerd"),
			Environment:     u.provisionerEnv,
			// Terraform, git and providers reach what the product's own
			// clients may (its egress proxy goes through this guard).
			Egress: u.guard,
		},
		AuditJournal:     l.AuditJournal(),
		ReplicaTrustFile: u.trust.CertFile(),
		Appliance:        func(ctx context.Context) (codersdk.Appliance, error) { return Overview(ctx, u.dir) },
		Telemetry:        false, UpdateCheck: false,
		OIDC: cfg.oidc(u.trust.CertFile(), u.guard), DisablePasswordAuth: cfg.DisablePasswordAuth,
		ExternalAuth:     cfg.externalAuth(u.trust.CertFile(), u.guard),
		AgentBinariesDir: filepath.Join(rel, bundle.DirBin),
		Version:          buildinfo.Version(),
		Logger:           u.log.With("component", "coderd"),
		RecentLogs:       u.opts.RecentLogs,
		HealthChecks:     map[string]func(context.Context) error{"mirror": u.mirrorHealth},
		// Runs on a context the API owns and waits for at shutdown.
		OnFirstUser: func(ctx context.Context, username, token string) {
			select {
			case <-u.apiReady:
			case <-ctx.Done():
				return
			}
			pushBundledTemplates(ctx, u.log, rel, u.m, token, u.localClient, u.registry)
		},
	})
	if err != nil {
		return err
	}
	if err := u.runUntilReady(ctx, "control plane", srv); err != nil {
		return err
	}
	u.srv = srv
	_, tlsAddr := srv.ListenAddrs()
	u.localClient = codersdk.New(&url.URL{Scheme: "https", Host: loopbackAddr(tlsAddr.String())})
	u.localClient.HTTPClient = &http.Client{Transport: u.guard.Wrap(localTransport(u.trust, srv.AccessURL().Hostname()))}
	close(u.apiReady)
	return nil
}

// startWatchdog feeds systemd's watchdog while /healthz (the database, the
// mirror) passes, when the unit asks for one.
func (u *upRun) startWatchdog(ctx context.Context) error {
	u.watch(ctx, func(ctx context.Context) error { return u.localClient.Healthz(ctx) })
	return nil
}

// watch feeds systemd's watchdog while healthy answers nil, until the stop,
// when the unit asks for a watchdog (see runWatchdog).
func (u *upRun) watch(ctx context.Context, healthy func(context.Context) error) {
	every := watchdogInterval()
	if every <= 0 {
		return
	}
	u.stop.Go(ctx, "watchdog", func(ctx context.Context) error {
		runWatchdog(ctx, every, healthy, u.log.With("component", "watchdog"))
		return nil
	})
}

// workspaceEnvironment is what the appliance adds to terraform's
// environment: CODER_WORKSPACE_LAUNCHER, the command that starts a
// workspace as its owner's account, and, when the appliance runs as the
// service user, the HOME and XDG_RUNTIME_DIR where rootless podman keeps
// the service user's images, containers and volumes.
func workspaceEnvironment(l Layout, rel, platform string, log *slog.Logger) (map[string]string, error) {
	coder := filepath.Join(rel, bundle.CoderPath(platform))
	if !fileExists(coder) {
		var err error
		if coder, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	if err := writeLaunchCommand(l, coder); err != nil {
		return nil, fmt.Errorf("write %s: %w", l.LaunchCommand(), err)
	}
	if _, err := os.Stat(l.LauncherSocket()); err != nil {
		log.Warn("no workspace launcher: process workspaces will not start until it runs (coder appliance up as root, or coder-appliance-launcher.service)",
			"socket", l.LauncherSocket())
	}
	env := map[string]string{"CODER_WORKSPACE_LAUNCHER": l.LaunchCommand()}
	if os.Geteuid() != 0 {
		for _, d := range []string{l.ServiceHome(), l.ServiceRuntime()} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return nil, err
			}
		}
		env["HOME"] = l.ServiceHome()
		env["XDG_RUNTIME_DIR"] = l.ServiceRuntime()
	}
	return env, nil
}

// servedRegistry is the mirror's host:port as templates name it: an
// unspecified listen address becomes the first configured host (or
// 127.0.0.1), which the serving certificate covers.
func servedRegistry(addr net.Addr, cfg Config) string {
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return net.JoinHostPort(cfg.AdvertisedHost(addr.String()), port)
}

// pushBundledTemplates offers the bundle's templates on first boot: they are
// pushed as the first user as soon as it exists. Each is packed from a copy
// whose image references point at registry (the release stays untouched).
// A push that fails for a reason that may pass (the database restarting,
// coderd busy) is tried again with backoff for up to two minutes; one
// coderd refuses (a bad template) is logged and not tried again.
func pushBundledTemplates(ctx context.Context, log *slog.Logger, rel string, m bundle.Manifest, token string, local *codersdk.Client, registry string) {
	client := *local
	client.SessionToken = token
	var bundled []string
	for _, img := range m.Components.Images {
		bundled = append(bundled, img.Ref)
	}
	for _, t := range m.Components.Templates {
		var buf bytes.Buffer
		if err := packRewritten(filepath.Join(rel, t.Path), append(slices.Clone(bundled), t.Images...), registry, &buf); err != nil {
			log.Error("pack bundled template", "template", t.Name, "err", err)
			continue
		}
		_, err := backoff.Retry(ctx, func() (codersdk.PushTemplateResult, error) {
			tpl, err := client.PushTemplate(ctx, codersdk.PushTemplateRequest{Name: t.Name, Tar: bytes.NewReader(buf.Bytes()), Message: "bundled with release " + m.Release})
			var apiErr *codersdk.Error
			if errors.As(err, &apiErr) && apiErr.StatusCode < http.StatusInternalServerError {
				return tpl, backoff.Permanent(err)
			}
			return tpl, err
		}, backoff.WithMaxElapsedTime(2*time.Minute), backoff.WithNotify(func(err error, next time.Duration) {
			log.Warn("push bundled template; retrying", "template", t.Name, "err", err, "in", next)
		}))
		if err != nil {
			log.Error("push bundled template", "template", t.Name, "err", err)
			continue
		}
		log.Info("bundled template pushed", "template", t.Name)
	}
	_ = client.Logout(ctx)
}

// packRewritten packs a copy of the template in src with its image
// references rewritten to registry.
func packRewritten(src string, refs []string, registry string, w io.Writer) error {
	tmp, err := os.MkdirTemp("", "coder-template-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dst := filepath.Join(tmp, "template")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return err
	}
	if _, err := mirror.RewriteImageRefs(dst, refs, registry); err != nil {
		return err
	}
	return templatetar.Pack(dst, w, 0)
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// writeAgentCA writes the site's own CAs (the appliance CA and imported
// ones, not the system roots) to DIR/run/agent-ca.pem: what agent init
// scripts carry so workspaces trust the appliance.
func writeAgentCA(l Layout) (string, error) {
	var pem []byte
	files := []string{filepath.Join(l.Certs(), certs.CAFile)}
	imported, _ := filepath.Glob(filepath.Join(l.Certs(), certs.ImportedDir, "*.pem"))
	files = append(files, imported...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		pem = append(pem, b...)
	}
	path := filepath.Join(l.Run(), "agent-ca.pem")
	return path, atomicfile.Write(path, pem, 0o644)
}

// readyRunner is a server Up runs until the stop: the control plane, or a
// workspace proxy.
type readyRunner interface {
	Run(ctx context.Context) error
	Ready() <-chan struct{}
}

// runUntilReady starts srv, pushes its stop (named name) and waits until it
// is ready. A server that stops before that fails the step; from then on
// one that stops by itself ends Up (u.failed). The stop returns Run's
// error.
func (u *upRun) runUntilReady(ctx context.Context, name string, srv readyRunner) error {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	stopped := make(chan struct{})
	var runErr error
	u.stop.Push(name, func(context.Context) error {
		cancel()
		<-stopped
		return runErr
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		close(stopped)
		if err == nil {
			err = errors.New("stopped during start-up")
		}
		return err
	case <-ctx.Done():
		cancel()
		go func() { <-done; close(stopped) }()
		return ctx.Err()
	}
	go func() {
		defer close(stopped)
		err := <-done
		if runCtx.Err() == nil {
			if err == nil {
				err = errors.New("stopped by itself")
			}
			u.failed <- fmt.Errorf("%s: %w", name, err)
			return
		}
		runErr = err
	}()
	return nil
}
