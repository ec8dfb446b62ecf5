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

	"airgapcoder/bundle"
	"airgapcoder/certs"
	"airgapcoder/coderd/codersdk"
	"airgapcoder/controlplane"
	"airgapcoder/internal/buildinfo"
	"airgapcoder/internal/egress"
	"airgapcoder/internal/templatetar"
	"airgapcoder/mirror"
	"airgapcoder/terraform"

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
}

// Up runs the current release as one supervised process tree until ctx is
// canceled: the bundled PostgreSQL (as the service user, data in DIR/data),
// the certificates, the mirror (providers + registry over HTTPS), the
// control plane (package controlplane: coderd with telemetry and update
// checks off, every workspace connection relayed) and its built-in
// provisioners running the bundled terraform against the bundled providers. Components start in that order, each waiting for the
// one before to be ready, and stop in reverse.
func Up(ctx context.Context, opts UpOptions) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return err
	}
	l := Layout{Dir: dir}
	cfg, err := LoadConfig(dir, opts.Overrides)
	if err != nil {
		return err
	}
	release, err := l.CurrentRelease()
	if err != nil {
		return err
	}
	if release == "" {
		return fmt.Errorf("nothing is installed in %s: run coder appliance install BUNDLE --dir %s first", dir, dir)
	}
	rel := l.Release(release)
	m, err := readManifest(rel)
	if err != nil {
		return err
	}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	log = log.With("release", release)
	log.Info("starting the appliance", "bundle", m.Name, "dir", dir)
	if err := os.MkdirAll(l.Run(), 0o755); err != nil {
		return err
	}

	// 1. Certificates: the appliance CA and a serving certificate for every
	// name the mirror and the control plane are reached or advertised by
	// (a wildcard listen address is advertised by the first of hosts).
	hosts := append([]string{"localhost", "127.0.0.1", "::1"}, cfg.Hosts...)
	for _, addr := range []string{cfg.TLSAddress, cfg.MirrorAddress, cfg.HTTPAddress} {
		if h := cfg.AdvertisedHost(addr); h != "" {
			hosts = append(hosts, h)
		}
	}
	hosts = append(hosts, cfg.AccessHost())
	// The egress guard: the product's HTTP clients reach only these hosts.
	guard, err := egress.New(append(dedupe(hosts), cfg.EgressAllow...), log.With("component", "egress"))
	if err != nil {
		return err
	}
	_ = os.Remove(l.egressReport())
	_ = os.Remove(l.restartReport())
	guard.OnRefuse(func(addr string, total int64) {
		if err := recordRefusal(l, addr, total, time.Now()); err != nil {
			log.Warn("record a refused connection", "err", err)
		}
	})
	guard.Install()
	issued, err := certs.EnsureServer(dir, dedupe(hosts), certs.Options{})
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	if err := checkAdvertisedNames(issued.Server, cfg); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	trust, err := certs.Load(dir)
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	agentCA, err := writeAgentCA(l)
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}

	// 2. PostgreSQL from the bundle's binaries, as the service user.
	pgURL, err := postgresTrusting(cfg.PostgresURL, trust.CertFile())
	if err != nil {
		return err
	}
	// supFailed hears a supervised component that keeps failing.
	supFailed := make(chan error, 1)
	if pgURL == "" {
		if m.Components.Postgres == nil {
			return errors.New("this bundle carries no PostgreSQL and postgres-url is not set")
		}
		pg, err := newPostgres(l, cfg, m, rel, log)
		if err != nil {
			return err
		}
		if err := pg.Start(ctx); err != nil {
			return fmt.Errorf("start postgres (data in %s): %w", l.Postgres(), err)
		}
		defer func() {
			_ = os.Remove(l.postgresInfo())
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := pg.Stop(stopCtx); err != nil {
				log.Error("stop postgres", "err", err)
			}
		}()
		if err := writePostgresInfo(l, pg); err != nil {
			return err
		}
		pgURL = pg.URL()
		// Restarted when it crashes or hangs (supervise.go); stopped
		// before PostgreSQL is.
		supCtx, stopSup := context.WithCancel(context.WithoutCancel(ctx))
		supDone := make(chan struct{})
		sup := newPostgresSupervisor(pg, log.With("component", "supervisor"), func(n int, cause error) {
			_ = notifySystemd(fmt.Sprintf("STATUS=restarting PostgreSQL (restart %d): %v", n, cause))
			if err := recordRestart(l, "postgres", n, cause, time.Now()); err != nil {
				log.Warn("record a restart", "err", err)
			}
		})
		go func() {
			defer close(supDone)
			if err := sup.Run(supCtx); err != nil {
				supFailed <- err
			}
		}()
		defer func() { stopSup(); <-supDone }()
	}

	// 3. The mirror: the release's providers and images over HTTPS.
	mirrorCert, err := certs.LoadServerCertificate(dir)
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	mir, err := mirror.NewServer(mirror.ServerOptions{
		Dir: dir, Certificate: mirrorCert, ProvidersDir: filepath.Join(rel, bundle.DirProviders), ImagesDir: filepath.Join(rel, bundle.DirImages),
		ModulesDir: filepath.Join(rel, bundle.DirModules),
		Address:    cfg.MirrorAddress, Logger: log.With("component", "mirror"),
	})
	if err != nil {
		return err
	}
	mirCtx, stopMirror := context.WithCancel(context.WithoutCancel(ctx))
	// mirDone is closed (not sent on) when Run returns, so that both the
	// wait for readiness and the deferred stop can see it: a mirror that
	// cannot listen used to leave the stop waiting for a value already
	// taken, and up hung with nothing logged.
	var mirErr error
	mirDone := make(chan struct{})
	go func() {
		defer close(mirDone)
		mirErr = mir.Run(mirCtx)
	}()
	defer func() {
		stopMirror()
		<-mirDone
	}()
	select {
	case <-mir.Ready():
	case <-mirDone:
		return mirErr
	case <-ctx.Done():
		return nil
	}
	// Advertised by name, probed on this host (loopback for a wildcard
	// address) and verified as that name.
	registry := servedRegistry(mir.Addr(), cfg)
	mirrorURL := "https://" + registry
	registryHost, _, _ := net.SplitHostPort(registry)
	mirrorProbe := &http.Client{Transport: guard.Wrap(localTransport(trust, registryHost)), Timeout: 5 * time.Second}
	mirrorLocal := "https://" + loopbackAddr(mir.Addr().String())
	log.Info("mirror ready", "url", mirrorURL)
	if _, err := trustForContainers(log, registry, agentCA, containerCertDirs(l)); err != nil {
		return err
	}
	// Workspaces of the process template start through the launcher, as
	// their owners' accounts (serviceuser.go).
	provisionerEnv, err := workspaceEnvironment(l, rel, platform, log)
	if err != nil {
		return err
	}

	// 4. coderd with its built-in provisioners.
	tf := ""
	tfVersion := terraform.DefaultVersion
	if m.Components.Terraform != nil {
		tfVersion = m.Components.Terraform.Version
		tf = filepath.Join(rel, bundle.TerraformPath(platform))
	}
	// coderd serves HTTPS with the appliance certificate; plain HTTP only
	// redirects. Its local client (bundled templates) dials this host and
	// verifies the access URL's name.
	var (
		ready       = make(chan struct{})
		localClient *codersdk.Client
	)
	srv, err := controlplane.New(controlplane.Config{
		HTTPAddress: cfg.HTTPAddress, AccessURL: cfg.AccessURL, PostgresURL: pgURL,
		Prometheus:    controlplane.PrometheusConfig{Enable: cfg.PrometheusEnable, Address: cfg.PrometheusAddress},
		AdvertiseHost: cfg.AdvertisedHost(cfg.TLSAddress),
		TLS: controlplane.TLSConfig{
			Enable: true, Address: cfg.TLSAddress,
			CertFile: filepath.Join(certs.CertsDir(dir), "server.pem"), KeyFile: filepath.Join(certs.CertsDir(dir), "server-key.pem"),
			StrictTransportSecurity: 365 * 24 * 3600,
		},
		ConfigDir: l.Data(), CacheDir: l.Cache(),
		ProvisionerDaemons: cfg.ProvisionerDaemons,
		Provisioner: controlplane.ProvisionerConfig{
			Terraform:       terraform.Options{Path: tf, Version: tfVersion},
			ProviderMirror:  filepath.Join(rel, bundle.DirProviders),
			ModuleMirror:    mirrorLocal + mirror.ModulesPath,
			CACertFile:      trust.CertFile(),
			AgentCACertFile: agentCA,
			WorkDir:         filepath.Join(l.Cache(), "provisionerd"),
			Environment:     provisionerEnv,
			// Terraform, git and providers reach what the product's own
			// clients may (its egress proxy goes through this guard).
			Egress: guard,
		},
		AuditJournal:     l.AuditJournal(),
		ReplicaTrustFile: trust.CertFile(),
		Appliance:        func(ctx context.Context) (codersdk.Appliance, error) { return Overview(ctx, dir) },
		Telemetry:        false, UpdateCheck: false,
		AgentBinariesDir: filepath.Join(rel, bundle.DirBin),
		Version:          buildinfo.Version(),
		Logger:           log.With("component", "coderd"),
		HealthChecks: map[string]func(context.Context) error{
			"mirror": func(ctx context.Context) error {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, mirrorLocal+"/healthz", nil)
				resp, err := mirrorProbe.Do(req)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("mirror /healthz: %s", resp.Status)
				}
				return nil
			},
		},
		OnFirstUser: func(ctx context.Context, username, token string) {
			select {
			case <-ready:
			case <-ctx.Done():
				return
			}
			pushBundledTemplates(ctx, log, rel, m, token, localClient, registry)
		},
	})
	if err != nil {
		return err
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Run(runCtx) }()
	select {
	case <-srv.Ready():
	case err := <-srvDone:
		return err
	}
	_, tlsAddr := srv.ListenAddrs()
	localURL := &url.URL{Scheme: "https", Host: loopbackAddr(tlsAddr.String())}
	localClient = codersdk.New(localURL)
	localClient.HTTPClient = &http.Client{Transport: guard.Wrap(localTransport(trust, srv.AccessURL().Hostname()))}
	close(ready)
	caFile := filepath.Join(certs.CertsDir(dir), "ca.pem")
	if issued.CA == nil {
		caFile = agentCA // a site certificate: its CA is among the imported ones
	}
	log.Info("the appliance is ready", "url", srv.AccessURL().String(), "mirror", mirrorURL, "ca_file", caFile,
		"first_user", fmt.Sprintf("coder login %s --ca-file %s --first-user-username admin --first-user-email admin@example.com --first-user-password ...", srv.AccessURL(), caFile))
	if opts.Ready != nil {
		close(opts.Ready)
	}
	// systemd (Type=notify) hears READY=1 only now that every part serves.
	if err := notifySystemd("READY=1\nSTATUS=serving " + srv.AccessURL().String()); err != nil {
		log.Warn("tell systemd the appliance is ready", "err", err)
	}
	// The watchdog is fed while /healthz (the database, the mirror) passes.
	if every := watchdogInterval(); every > 0 {
		wdDone := make(chan struct{})
		go func() {
			defer close(wdDone)
			runWatchdog(runCtx, every, func(ctx context.Context) error { return localClient.Healthz(ctx) }, log.With("component", "watchdog"))
		}()
		defer func() { stopRun(); <-wdDone }()
	}
	select {
	case err = <-srvDone:
	case err = <-supFailed:
		// systemd restarts the whole appliance (Restart=on-failure).
		log.Error("stopping the appliance: a component keeps failing", "err", err)
		stopRun()
		<-srvDone
	}
	_ = notifySystemd("STOPPING=1")
	return err
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
		if _, err := client.PushTemplate(ctx, codersdk.PushTemplateRequest{Name: t.Name, Tar: &buf, Message: "bundled with release " + m.Release}); err != nil {
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
	files := []string{filepath.Join(certs.CertsDir(l.Dir), "ca.pem")}
	imported, _ := filepath.Glob(filepath.Join(certs.CertsDir(l.Dir), "imported", "*.pem"))
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
