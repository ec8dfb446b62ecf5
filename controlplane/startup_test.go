package controlplane_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/certs"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/controlplane"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testport"
	"airgapcoder/terraform"
)

// freeAddr is a loopback address nobody listens on (just now).
func freeAddr(t *testing.T) string {
	t.Helper()
	return testport.Addr(t)
}

// takenAddr is a loopback address the test listens on until it ends.
func takenAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// tlsPair generates a CA and a serving certificate for 127.0.0.1 and
// returns the certificate and key files.
func tlsPair(t *testing.T) (cert, key string) {
	t.Helper()
	dir := t.TempDir()
	if _, err := certs.Generate(dir, []string{"127.0.0.1", "localhost"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(certs.CertsDir(dir), certs.ServerFile), filepath.Join(certs.CertsDir(dir), certs.ServerKeyFile)
}

// fakeTerraform is a script that answers `terraform version` with version.
func fakeTerraform(t *testing.T, version string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "terraform")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho 'Terraform v"+version+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStartupFailures makes each start-up step fail in turn: Run returns
// within seconds an error that names the step and the cause, Ready is
// never closed, and every address the server took can be bound again.
func TestStartupFailures(t *testing.T) {
	t.Parallel()
	goodCert, goodKey := tlsPair(t)
	_, otherKey := tlsPair(t)
	deadPG := "postgres://coder:x@" + freeAddr(t) + "/none?sslmode=disable&connect_timeout=5"
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tfOK := fakeTerraform(t, terraform.DefaultVersion)

	tests := []struct {
		name string
		// cfg changes a configuration that would start: an external
		// database, plain HTTP and HTTPS on free loopback ports, no
		// built-in provisioners.
		cfg  func(t *testing.T, c *controlplane.Config)
		want []string
	}{
		{
			name: "ExternalPostgresUnreachable",
			cfg:  func(t *testing.T, c *controlplane.Config) { c.PostgresURL = deadPG },
			want: []string{"open database", "connect to postgres"},
		},
		{
			name: "ExternalPostgresURLMalformed",
			cfg:  func(t *testing.T, c *controlplane.Config) { c.PostgresURL = "postgres://%zz" },
			want: []string{"open database", "parse postgres url"},
		},
		{
			name: "HTTPAddressInUse",
			cfg: func(t *testing.T, c *controlplane.Config) {
				c.HTTPAddress = takenAddr(t)
			},
			want: []string{"open listeners", "--http-address", "address already in use"},
		},
		{
			name: "TLSAddressInUse",
			cfg: func(t *testing.T, c *controlplane.Config) {
				c.TLS.Address = takenAddr(t)
			},
			want: []string{"open listeners", "--tls-address", "address already in use"},
		},
		{
			name: "TLSCertFileMissing",
			cfg:  func(t *testing.T, c *controlplane.Config) { c.TLS.CertFile = missing },
			want: []string{"load TLS certificate", missing, "no such file"},
		},
		{
			name: "TLSKeyOfAnotherCertificate",
			cfg:  func(t *testing.T, c *controlplane.Config) { c.TLS.KeyFile = otherKey },
			want: []string{"load TLS certificate", otherKey, "does not belong", goodCert},
		},
		{
			name: "TerraformWrongVersion",
			cfg: func(t *testing.T, c *controlplane.Config) {
				c.ProvisionerDaemons = 1
				c.Provisioner.Terraform = terraform.Options{Path: fakeTerraform(t, "1.2.3")}
			},
			want: []string{"find terraform", "version 1.2.3", "want exactly " + terraform.DefaultVersion, "--provisioner-daemons=0"},
		},
		{
			name: "TerraformMissing",
			cfg: func(t *testing.T, c *controlplane.Config) {
				c.ProvisionerDaemons = 1
				c.Provisioner.Terraform = terraform.Options{Path: filepath.Join(t.TempDir(), "terraform")}
			},
			want: []string{"find terraform", "no such file", "--provisioner-daemons=0"},
		},
		{
			// The last step, after the API serves on every listener.
			name: "ProvisionerAgentCAMissing",
			cfg: func(t *testing.T, c *controlplane.Config) {
				c.ProvisionerDaemons = 2
				c.Provisioner.Terraform = terraform.Options{Path: tfOK}
				c.Provisioner.AgentCACertFile = missing
			},
			want: []string{"start built-in provisioners", "agent CA", missing},
		},
		{
			name: "ProvisionerWorkDirUnusable",
			cfg: func(t *testing.T, c *controlplane.Config) {
				file := filepath.Join(t.TempDir(), "file")
				if err := os.WriteFile(file, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				c.ProvisionerDaemons = 1
				c.Provisioner.Terraform = terraform.Options{Path: tfOK}
				c.Provisioner.WorkDir = filepath.Join(file, "work")
			},
			want: []string{"start built-in provisioners", "create work dir", "not a directory"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			httpAddr, tlsAddr := freeAddr(t), freeAddr(t)
			cfg := controlplane.Config{
				HTTPAddress: httpAddr, PostgresURL: coderdtest.NewDatabase(t), ConfigDir: filepath.Join(t.TempDir(), "config"),
				TLS:    controlplane.TLSConfig{Enable: true, Address: tlsAddr, CertFile: goodCert, KeyFile: goodKey},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTimeout: 5 * time.Second,
			}
			tt.cfg(t, &cfg)
			srv, err := controlplane.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			done := make(chan error, 1)
			go func() { done <- srv.Run(context.Background()) }()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return within 20s")
			}
			took := time.Since(began)
			if err == nil {
				t.Fatal("Run: got nil, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run: got %q, want it to name %q", err, w)
				}
			}
			if took > 10*time.Second {
				t.Errorf("Run returned after %s, want within a few seconds", took)
			}
			select {
			case <-srv.Ready():
				t.Error("Ready was closed, yet Run failed")
			default:
			}
			// The addresses the server was given (not the test's own taken
			// one) are free again.
			for _, addr := range []string{cfg.HTTPAddress, cfg.TLS.Address} {
				if addr == httpAddr || addr == tlsAddr {
					mustBind(t, addr)
				}
			}
			t.Logf("Run failed after %s: %v", took.Round(time.Millisecond), err)
		})
	}
}

// mustBind fails the test unless addr can be listened on.
func mustBind(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("%s is still taken after Run returned: %v", addr, err)
		return
	}
	ln.Close()
}

// cancelAt is a log handler that cancels a context when Run is about to
// run the start-up step named step.
type cancelAt struct {
	step   string
	cancel context.CancelFunc
}

func (h *cancelAt) Enabled(context.Context, slog.Level) bool { return true }
func (h *cancelAt) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *cancelAt) WithGroup(string) slog.Handler            { return h }
func (h *cancelAt) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "start-up" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "step" && a.Value.String() == h.step {
			h.cancel()
		}
		return true
	})
	return nil
}

// startable is a configuration that starts every part but the built-in
// PostgreSQL: HTTPS, plain HTTP and two built-in provisioners (with a
// terraform that only answers `terraform version`).
func startable(t *testing.T) controlplane.Config {
	t.Helper()
	cert, key := tlsPair(t)
	return controlplane.Config{
		HTTPAddress: freeAddr(t), PostgresURL: coderdtest.NewDatabase(t), ConfigDir: filepath.Join(t.TempDir(), "config"),
		TLS:                controlplane.TLSConfig{Enable: true, Address: freeAddr(t), CertFile: cert, KeyFile: key},
		ProvisionerDaemons: 2, Provisioner: controlplane.ProvisionerConfig{Terraform: terraform.Options{Path: fakeTerraform(t, terraform.DefaultVersion)}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTimeout: 5 * time.Second,
	}
}

// TestStartupCanceled cancels Run's context just before each start-up
// step: Run returns nil within seconds, never closes Ready, and frees its
// addresses. The steps' names come from the debug log.
func TestStartupCanceled(t *testing.T) {
	t.Parallel()
	steps := []string{
		"load TLS certificate", "find terraform for the built-in provisioners", "start built-in postgres",
		"open database", "migrate database", "listen for database notifications", "open listeners",
		"resolve access URL", "start update check", "create API", "start telemetry", "serve",
		"start built-in provisioners",
	}
	for _, step := range steps {
		t.Run(strings.ReplaceAll(step, " ", "_"), func(t *testing.T) {
			t.Parallel()
			cfg := startable(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			h := &cancelAt{step: step, cancel: cancel}
			cfg.Logger = slog.New(h)
			srv, err := controlplane.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			done := make(chan error, 1)
			go func() { done <- srv.Run(ctx) }()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return within 20s of the cancel")
			}
			if err != nil {
				t.Fatalf("Run: got %v, want nil after a cancel", err)
			}
			if ctx.Err() == nil {
				t.Fatalf("Run returned before step %q was reached", step)
			}
			select {
			case <-srv.Ready():
				t.Error("Ready was closed, yet start-up was canceled")
			default:
			}
			mustBind(t, cfg.HTTPAddress)
			mustBind(t, cfg.TLS.Address)
			t.Logf("returned %s after the start", time.Since(began).Round(time.Millisecond))
		})
	}
}

// TestRunCanceledAfterReady: a started server with every listener and
// built-in provisioners stops on cancel, returns nil and frees its
// addresses; a second Run is refused.
func TestRunCanceledAfterReady(t *testing.T) {
	t.Parallel()
	cfg := startable(t)
	srv, err := controlplane.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("not ready within a minute")
	}
	httpAddr, tlsAddr := srv.ListenAddrs()
	if httpAddr.String() != cfg.HTTPAddress || tlsAddr.String() != cfg.TLS.Address {
		t.Fatalf("ListenAddrs: got %s, %s; want %s, %s", httpAddr, tlsAddr, cfg.HTTPAddress, cfg.TLS.Address)
	}
	if got, want := srv.AccessURL().String(), "https://"+cfg.TLS.Address; got != want {
		t.Fatalf("AccessURL: got %s, want %s", got, want)
	}
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: got %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of the cancel")
	}
	t.Logf("stopped in %s", time.Since(began).Round(time.Millisecond))
	mustBind(t, cfg.HTTPAddress)
	mustBind(t, cfg.TLS.Address)
	if err := srv.Run(context.Background()); err == nil {
		t.Fatal("a second Run: got nil, want an error")
	}
}

// TestServerCommandMissingCertificate runs the real binary: `coder server`
// with a TLS certificate file that does not exist exits 1 within seconds,
// naming the file.
func TestServerCommandMissingCertificate(t *testing.T) {
	t.Parallel()
	bin := testbin.Coder(t)
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "server", "--tls-enable", "--tls-address", freeAddr(t),
		"--tls-cert-file", "/nonexistent.pem", "--tls-key-file", "/nonexistent-key.pem")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, "config"), "XDG_CACHE_HOME=" + filepath.Join(home, "cache")}
	began := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(began)
	if ctx.Err() != nil {
		t.Fatalf("coder server still running after 10s:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("coder server: got %v, want exit 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "/nonexistent.pem") {
		t.Fatalf("output does not name /nonexistent.pem:\n%s", out)
	}
	t.Logf("exit 1 after %s: %s", took.Round(time.Millisecond), strings.TrimSpace(string(out)))
}
