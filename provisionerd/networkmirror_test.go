package provisionerd_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"airgapcoder/certs"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testprovider"
	"airgapcoder/mirror"
	"airgapcoder/provisionerd"
)

// TestNetworkMirror: an external provisioner given an https mirror URL uses
// it as terraform's network_mirror, trusting the appliance CA only through
// the CA file it hands terraform.
func TestNetworkMirror(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Generate(dir, []string{"127.0.0.1", "localhost"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	trust, err := certs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := certs.LoadServerCertificate(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mirror.NewServer(mirror.ServerOptions{Dir: dir, Certificate: cert, ProvidersDir: testprovider.Mirror(t), Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	mirrorURL := "https://" + srv.Addr().String() + mirror.ProvidersPath

	h := newHarness(t)
	c := h.deployment.Client()
	c.ProvisionerPSK = "psk"
	for _, tc := range []struct {
		name   string
		caFile string
		ok     bool
	}{{"WithCA", trust.CertFile(), true}, {"WithoutCA", "", false}} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := provisionerd.New(provisionerd.Options{
				Client: c, Name: "net-" + tc.name, Tags: map[string]string{"mirror": tc.name}, TerraformPath: terraformPath(t),
				ProviderMirror: mirrorURL, CACertFile: tc.caFile, WorkDir: t.TempDir(), AcquireWait: 2 * time.Second,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			dctx, dcancel := context.WithCancel(context.Background())
			ddone := make(chan struct{})
			go func() { defer close(ddone); _ = d.Run(dctx) }()
			defer func() { dcancel(); <-ddone }()
			v := coderdtest.UploadVersion(t, h.owner, "", map[string]string{"main.tf": `
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
`}, map[string]string{"mirror": tc.name})
			j := waitJob(t, func() (codersdk.ProvisionerJob, error) {
				v, err := h.owner.TemplateVersion(context.Background(), v.ID)
				return v.Job, err
			}, 60*time.Second)
			if tc.ok && j.Status != codersdk.ProvisionerJobSucceeded {
				t.Fatalf("import through %s: %s (%s)", mirrorURL, j.Status, j.Error)
			}
			if !tc.ok && (j.Status != codersdk.ProvisionerJobFailed || !strings.Contains(j.Error, "x509")) {
				t.Fatalf("import without the CA: got %s (%q), want failed with an x509 error", j.Status, j.Error)
			}
		})
	}
}
