package appliance

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"airgapcoder/bundle"
	"airgapcoder/certs"
	"airgapcoder/codersdk"
)

// UpgradeOptions configure Upgrade.
type UpgradeOptions struct {
	Bundle        string
	Dir           string
	PublicKey     ed25519.PublicKey
	AllowUnsigned bool
	// Force allows installing an older release than the current one.
	Force bool
	// HealthTimeout bounds how long the new release may take to answer
	// /healthz (default 3 minutes).
	HealthTimeout time.Duration
	Logger        *slog.Logger
}

// UpgradeResult says what happened.
type UpgradeResult struct {
	From, To string
	// RolledBack says the new release failed and a rollback was tried;
	// RollbackErr is why that rollback failed (nil: the previous release
	// serves again).
	RolledBack  bool
	RollbackErr error
	// Backup is the copy of the database taken before the switch.
	Backup string
}

// Upgrade installs a new release beside the current one, copies the
// database aside, switches to the new release and starts it to check it
// comes up healthy (its migrations run at that start). When it does not,
// it rolls back: the database copy is put back, the previous release is
// made current again and started to check it serves. The appliance must be
// stopped while upgrading; run `coder appliance up` (or start the service)
// afterwards.
//
// The upgrade, its outcome and a rollback are recorded in the audit
// journal.
func Upgrade(ctx context.Context, opts UpgradeOptions) (res UpgradeResult, err error) {
	l := Layout{Dir: opts.Dir}
	if dir, err := filepath.Abs(opts.Dir); err == nil {
		l.Dir = dir
	}
	defer func() {
		if res.From == "" {
			return // nothing installed: no deployment to record it for
		}
		log := opts.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		op := newOperation(codersdk.AuditActionUpgrade, res.To).set("previous_release", res.From).
			set("bundle_file", opts.Bundle).set("database_copy", res.Backup)
		if opts.PublicKey != nil {
			op.set("signed_by", bundle.KeyID(opts.PublicKey))
		}
		if opts.Force {
			op.set("forced", "true")
		}
		op.record(l, log, fmt.Sprintf("upgrade from %s to %s", res.From, bundleDescription(opts.Bundle, res.To)), err)
		if !res.RolledBack {
			return
		}
		rb := newOperation(codersdk.AuditActionRollback, res.From).set("failed_release", res.To).set("database_copy", res.Backup)
		rb.record(l, log, fmt.Sprintf("rollback from %s to %s and its database", res.To, res.From), res.RollbackErr)
	}()
	return upgrade(ctx, opts)
}

func upgrade(ctx context.Context, opts UpgradeOptions) (UpgradeResult, error) {
	var res UpgradeResult
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = 3 * time.Minute
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return res, err
	}
	l := Layout{Dir: dir}
	cfg, err := LoadConfig(dir, nil)
	if err != nil {
		return res, err
	}
	if res.From, err = l.CurrentRelease(); err != nil {
		return res, err
	}
	if res.From == "" {
		return res, fmt.Errorf("nothing is installed in %s: use coder appliance install", dir)
	}
	m, _, err := bundle.Inspect(opts.Bundle)
	if err != nil {
		return res, fmt.Errorf("read bundle %s: %w", opts.Bundle, err)
	}
	res.To = m.Release
	switch c := compareReleases(m.Release, res.From); {
	case c == 0:
		return res, fmt.Errorf("release %s is already current", m.Release)
	case c < 0 && !opts.Force:
		return res, fmt.Errorf("release %s is older than the current %s: refusing to downgrade (pass --force to do it anyway)", m.Release, res.From)
	}
	if healthy(ctx, dir, cfg) == nil {
		return res, fmt.Errorf("the appliance is running (%s answers /healthz): stop it first", cfg.accessURL())
	}
	if _, err := install(ctx, InstallOptions{Bundle: opts.Bundle, Dir: dir, PublicKey: opts.PublicKey, AllowUnsigned: opts.AllowUnsigned, Logger: log}, false); err != nil {
		return res, err
	}

	if cfg.PostgresURL == "" && fileExists(l.Postgres()) {
		res.Backup = filepath.Join(l.Backups(), fmt.Sprintf("pre-upgrade-%s-%s", res.From, time.Now().UTC().Format("20060102T150405Z")))
		if err := os.MkdirAll(res.Backup, 0o700); err != nil {
			return res, err
		}
		// The server is stopped, so a file copy of the cluster is consistent.
		if out, err := exec.CommandContext(ctx, "cp", "-a", l.Postgres(), res.Backup).CombinedOutput(); err != nil {
			return res, fmt.Errorf("copy the database aside: %v: %s", err, bytes.TrimSpace(out))
		}
		log.Info("database copied aside", "backup", res.Backup)
	}
	if err := l.Activate(m.Release); err != nil {
		return res, err
	}
	log.Info("switched to the new release; starting it", "from", res.From, "to", res.To)
	startErr := tryStart(ctx, l, cfg, m.Release, opts.HealthTimeout, log)
	if startErr == nil {
		log.Info("upgrade complete", "release", res.To)
		return res, nil
	}

	// Roll back: the database as it was, the previous release current.
	log.Error("the new release did not come up healthy; rolling back", "release", res.To, "err", startErr)
	res.RolledBack = true
	fail := func(err error) (UpgradeResult, error) {
		res.RollbackErr = err
		return res, err
	}
	if res.Backup != "" {
		if err := os.RemoveAll(l.Postgres()); err != nil {
			return fail(fmt.Errorf("roll back: %w (the database copy is in %s)", err, res.Backup))
		}
		if out, err := exec.CommandContext(ctx, "cp", "-a", filepath.Join(res.Backup, "postgres"), l.Data()).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("roll back: restore the database: %v: %s (the copy is in %s)", err, bytes.TrimSpace(out), res.Backup))
		}
	}
	if err := l.switchLink(l.Current(), res.From); err != nil {
		return fail(fmt.Errorf("roll back: %w", err))
	}
	if err := l.switchLink(l.Previous(), res.To); err != nil {
		return fail(fmt.Errorf("roll back: %w", err))
	}
	if err := tryStart(ctx, l, cfg, res.From, opts.HealthTimeout, log); err != nil {
		return fail(fmt.Errorf("release %s failed (%v) and the rolled-back release %s does not start either: %w", res.To, startErr, res.From, err))
	}
	return res, fmt.Errorf("release %s did not come up healthy: %v; rolled back to %s, which serves again", res.To, startErr, res.From)
}

// tryStart runs `appliance up` with the release's own coder binary until
// /healthz answers, then stops it.
func tryStart(ctx context.Context, l Layout, cfg Config, release string, timeout time.Duration, log *slog.Logger) error {
	bin := filepath.Join(l.Release(release), bundle.CoderPath(runtime.GOOS+"/"+runtime.GOARCH))
	var out bytes.Buffer
	cmd := exec.Command(bin, "appliance", "up", "--dir", l.Dir)
	cmd.Env = withoutNotifySocket(os.Environ())
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("did not stop within 90s after SIGTERM")
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("it exited (%v): %s", err, lastLines(out.String(), 5))
		case <-ctx.Done():
			_ = stop()
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		if healthy(ctx, l.Dir, cfg) == nil {
			log.Info("release is healthy", "release", release)
			if err := stop(); err != nil {
				return fmt.Errorf("healthy, but stopping it failed: %w", err)
			}
			return nil
		}
		if time.Now().After(deadline) {
			_ = stop()
			return fmt.Errorf("no healthy /healthz within %s: %s", timeout, lastLines(out.String(), 5))
		}
	}
}

// healthy probes /healthz over HTTPS on tls-address (on this host,
// verified as the access URL's name), else over plain HTTP on http-address,
// which answers /healthz too: so a release from before HTTPS, started by a
// rollback, counts as healthy as well.
func healthy(ctx context.Context, dir string, cfg Config) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	probe := func(client *http.Client, url string) error { return getHealthz(ctx, client, url, url) }
	var err error
	if trust, loadErr := certs.Load(dir); loadErr == nil {
		client := &http.Client{Transport: localTransport(trust, cfg.AccessHost())}
		if err = probe(client, "https://"+loopbackAddr(cfg.TLSAddress)+"/healthz"); err == nil {
			return nil
		}
	}
	if cfg.HTTPAddress != "" {
		if httpErr := probe(&http.Client{Transport: &http.Transport{}}, "http://"+loopbackAddr(cfg.HTTPAddress)+"/healthz"); httpErr == nil {
			return nil
		} else if err == nil {
			err = httpErr
		}
	}
	if err == nil {
		err = errors.New("no listener to probe")
	}
	return err
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// compareReleases orders release names: dot-separated parts compared
// numerically when both are numbers, else as strings.
func compareReleases(a, b string) int {
	pa, pb := strings.FieldsFunc(a, isSep), strings.FieldsFunc(b, isSep)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		switch {
		case ea == nil && eb == nil && na != nb:
			if na < nb {
				return -1
			}
			return 1
		case (ea != nil || eb != nil) && pa[i] != pb[i]:
			return strings.Compare(pa[i], pb[i])
		}
	}
	return len(pa) - len(pb)
}

func isSep(r rune) bool { return r == '.' || r == '-' || r == '+' }
