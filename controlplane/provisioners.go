package controlplane

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coder/quartz"

	"airgapcoder/codersdk"
	"airgapcoder/internal/clockwait"
	"airgapcoder/provisionerd"
	"airgapcoder/terraform"
)

// findTerraform locates the pinned terraform when built-in provisioners
// run: a missing or wrong one is a start-up error, found before anything
// starts, not a failed build later.
func (st *startup) findTerraform(ctx context.Context) error {
	cfg := st.s.cfg
	if cfg.ProvisionerDaemons == 0 {
		return nil
	}
	opts := cfg.Provisioner.Terraform
	if opts.InstallDir == "" {
		opts.InstallDir = filepath.Join(cfg.CacheDir, "terraform")
	}
	if opts.Logger == nil {
		opts.Logger = st.log.With("component", "terraform")
	}
	path, err := terraform.Find(ctx, opts)
	if err != nil {
		return fmt.Errorf("%w (or run with --provisioner-daemons=0)", err)
	}
	st.terraformPath = path
	return nil
}

// startProvisioners starts the built-in provisioner daemons. They speak
// the same protocol as external ones, over a private loopback listener,
// authenticated by a key that lives only in this process. Each registers
// before Run reports ready. They are the last part started, so on shutdown
// they stop first, while the API can still hear them report the job they
// were running.
func (st *startup) startProvisioners(ctx context.Context) error {
	cfg := st.s.cfg
	if cfg.ProvisionerDaemons == 0 {
		return nil
	}
	workDir := cfg.Provisioner.WorkDir
	if workDir == "" {
		workDir = filepath.Join(cfg.CacheDir, "provisionerd")
	}
	if err := os.MkdirAll(workDir, 0o700); err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on loopback: %w", err)
	}
	st.stop.Push("built-in provisioners' listener", closeListener(ln))
	internalURL := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	daemons := make([]*provisionerd.Daemon, cfg.ProvisionerDaemons)
	for i := range daemons {
		client := codersdk.New(internalURL)
		client.ProvisionerPSK = st.builtinKey
		d, err := provisionerd.New(provisionerd.Options{
			Client: client, Name: fmt.Sprintf("built-in-%d", i+1), Version: cfg.Version,
			TerraformPath: st.terraformPath, ProviderMirror: cfg.Provisioner.ProviderMirror,
			ModuleMirror: cfg.Provisioner.ModuleMirror, CACertFile: cfg.Provisioner.CACertFile, AgentCACertFile: cfg.Provisioner.AgentCACertFile,
			WorkDir: workDir, AccessURL: st.accessURL.String(), Environment: cfg.Provisioner.Environment, Egress: cfg.Provisioner.Egress, Logger: st.log.With("component", "provisionerd"), Clock: cfg.Clock,
		})
		if err != nil {
			return err
		}
		daemons[i] = d
	}
	st.serveHTTP("built-in provisioners' API", ln, st.handler, nil)
	for _, d := range daemons {
		if err := d.Register(ctx); err != nil {
			return err
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for i, d := range daemons {
		wg.Go(func() { runSupervised(runCtx, st.log, cfg.Clock, fmt.Sprintf("built-in-%d", i+1), d.Run) })
	}
	st.stop.Push("built-in provisioners", func(context.Context) error {
		cancel()
		wg.Wait()
		return nil
	})
	st.log.Info("built-in provisioners started", "count", cfg.ProvisionerDaemons, "terraform", st.terraformPath, "mirror", cfg.Provisioner.ProviderMirror)
	return nil
}

// runSupervised runs a built-in provisioner until ctx ends, and again,
// after a backoff (1 s doubling to 30 s, back to 1 s after a run of more
// than a minute), each time it stops by itself: a daemon that cannot
// create its work folder or egress proxy now may later, and a deployment
// must not be left without its provisioners. The backoff and a run's
// length are on clock (the timer is tagged "controlplane",
// "provisionerRestart").
func runSupervised(ctx context.Context, log *slog.Logger, clock quartz.Clock, name string, run func(context.Context) error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.Multiplier, b.MaxInterval, b.RandomizationFactor = time.Second, 2, 30*time.Second, 0
	for {
		started := clock.Now()
		err := run(ctx)
		if ctx.Err() != nil {
			return
		}
		if clock.Since(started) > time.Minute {
			b.Reset()
		}
		wait := b.NextBackOff()
		log.Error("built-in provisioner stopped; restarting it", "provisioner", name, "err", err, "in", wait)
		if !clockwait.Sleep(ctx, clock, wait, nil, "controlplane", "provisionerRestart") {
			return
		}
	}
}

// randomKey is a fresh secret for the built-in provisioners.
func randomKey() string { return rand.Text() }
