package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// slowDaemon runs a deployment's jobs as a provisioner daemon would, taking
// importDelay over each template import. It reports the first error.
func slowDaemon(ctx context.Context, client *codersdk.Client, daemonID string, importDelay time.Duration, errs chan<- error) {
	for ctx.Err() == nil {
		j, err := client.AcquireJob(ctx, daemonID, 5*time.Second)
		if err != nil {
			if ctx.Err() == nil {
				errs <- fmt.Errorf("acquire: %w", err)
			}
			return
		}
		if j == nil {
			continue
		}
		req := codersdk.CompleteJobRequest{}
		if j.Type == codersdk.ProvisionerJobTypeTemplateVersionImport {
			select {
			case <-ctx.Done():
				return
			case <-time.After(importDelay):
			}
		} else {
			req.State = fmt.Appendf(nil, `{"build":%d}`, j.BuildNumber)
		}
		if err := client.CompleteJob(ctx, daemonID, j.JobID, req); err != nil && ctx.Err() == nil {
			errs <- fmt.Errorf("complete %s job: %w", j.Type, err)
			return
		}
	}
}

// TestCreateRightAfterFirstLogin: the deployment imports a template in its
// first-user hook (as the appliance pushes its bundled templates), slowly;
// `coder create --template` typed right after `coder login --first-user-...`
// waits for it, saying so once, instead of failing with "no template".
func TestCreateRightAfterFirstLogin(t *testing.T) {
	t.Parallel()
	const psk = "first-boot-psk"
	addr := freeAddr(t)
	deploymentURL, err := url.Parse("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	hookDone := make(chan error, 1)
	tar := coderdtest.TemplateTar(t, coderdtest.MinimalTemplate)
	d := coderdtest.New(t, coderdtest.Options{
		ProvisionerPSK: psk, Address: addr,
		OnFirstUser: func(ctx context.Context, _, token string) {
			c := codersdk.New(deploymentURL)
			c.SessionToken = token
			_, err := c.PushTemplate(ctx, codersdk.PushTemplateRequest{Name: "slow", Tar: bytes.NewReader(tar), Message: "first boot"})
			hookDone <- err
		},
	})
	daemonClient := d.Client()
	daemonClient.ProvisionerPSK = psk
	daemon := coderdtest.NewDaemon(t, daemonClient, "slow-daemon", nil)
	ctx, cancel := context.WithCancel(context.Background())
	daemonErrs := make(chan error, 1)
	daemonDone := make(chan struct{})
	go func() {
		defer close(daemonDone)
		slowDaemon(ctx, daemonClient, daemon.ID, 3*time.Second, daemonErrs)
	}()
	t.Cleanup(func() {
		cancel()
		<-daemonDone
	})

	config := t.TempDir()
	code, stdout, stderr := runMain(t, nil, "login", d.URL.String(), "--global-config", config,
		"--first-user-username", "admin", "--first-user-email", "admin@example.com", "--first-user-password", "password-for-tests")
	if code != 0 {
		t.Fatalf("coder login: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if want := "Bundled templates are being imported; `coder templates list` shows them when ready."; !strings.Contains(stderr, want) {
		t.Errorf("coder login: stderr does not say %q:\n%s", want, stderr)
	}

	began := time.Now()
	code, stdout, stderr = runMain(t, nil, "create", "x", "--template", "slow", "-y", "--global-config", config)
	if code != 0 {
		select {
		case err := <-daemonErrs:
			t.Errorf("daemon: %v", err)
		default:
		}
		t.Fatalf("coder create right after login: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	t.Logf("coder create waited and finished in %s", time.Since(began).Round(time.Millisecond))
	const waiting = "Waiting for template slow: the appliance is still importing it."
	if n := strings.Count(stderr, waiting); n != 1 {
		t.Errorf("coder create: stderr says %q %d times, want once:\n%s", waiting, n, stderr)
	}
	if !strings.Contains(stdout, "Workspace x created and running.") {
		t.Errorf("coder create: stdout %q, want the workspace created", stdout)
	}
	select {
	case err := <-hookDone:
		if err != nil {
			t.Errorf("first-user hook: push template: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("first-user hook did not finish")
	}

	// Once nothing is being imported, a missing template fails at once.
	began = time.Now()
	code, _, stderr = runMain(t, nil, "create", "y", "--template", "missing", "-y", "--global-config", config)
	if code != 1 || !strings.Contains(stderr, `no template "missing"`) || strings.Contains(stderr, "Waiting for template") {
		t.Errorf("create from a missing template: exit %d, stderr %q; want exit 1 naming it, without waiting", code, stderr)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("create from a missing template took %s, want no wait", took)
	}
	select {
	case err := <-daemonErrs:
		t.Errorf("daemon: %v", err)
	default:
	}
}
