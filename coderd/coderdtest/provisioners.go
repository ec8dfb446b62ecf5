package coderdtest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testrun"
	"airgapcoder/provisionerd"
	"airgapcoder/terraform"
)

// RealDaemon is a provisioner daemon NewWithProvisioners starts.
type RealDaemon struct {
	Name string
	Tags map[string]string
}

// realPSK is the pre-shared key the real daemons register with.
const realPSK = "coderdtest-real-provisioners"

// NewWithProvisioners starts a deployment that builds real workspaces:
// coderBinary is served as this platform's agent binary (the init scripts
// download and run it), and each daemon (one untagged "builtin" daemon
// when none are given) runs the real terraform against the test mirror of
// the official provider. Everything stops when the test ends.
func NewWithProvisioners(t testing.TB, coderBinary string, daemons ...RealDaemon) *Deployment {
	t.Helper()
	return NewWithProvisionersOptions(t, coderBinary, Options{}, daemons...)
}

// NewWithProvisionersOptions is NewWithProvisioners with opts (its
// provisioner PSK, agent binaries and heartbeat are set here). With
// opts.TLS the daemons' agent init scripts carry the deployment's
// certificate, as an appliance's carry its CA.
func NewWithProvisionersOptions(t testing.TB, coderBinary string, opts Options, daemons ...RealDaemon) *Deployment {
	t.Helper()
	tf, err := terraform.Find(context.Background(), terraform.Options{})
	if err != nil {
		t.Fatalf("the tests need terraform %s on the PATH: %v", terraform.DefaultVersion, err)
	}
	bins := t.TempDir()
	if err := os.Symlink(coderBinary, filepath.Join(bins, "coder-"+runtime.GOOS+"-"+runtime.GOARCH)); err != nil {
		t.Fatal(err)
	}
	opts.ProvisionerPSK, opts.AgentBinariesDir, opts.AgentHeartbeatInterval = realPSK, bins, time.Second
	d := New(t, opts)
	if len(daemons) == 0 {
		daemons = []RealDaemon{{Name: "builtin"}}
	}
	for _, rd := range daemons {
		c := d.Client()
		c.ProvisionerPSK = realPSK
		daemon, err := provisionerd.New(provisionerd.Options{
			Client: c, Name: rd.Name, Tags: rd.Tags, TerraformPath: tf, ProviderMirror: testprovider.Mirror(t),
			WorkDir: t.TempDir(), AcquireWait: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			AgentCACertFile: d.CAFile,
		})
		if err != nil {
			t.Fatal(err)
		}
		testrun.Start(t, "provisioner daemon "+rd.Name, daemon.Run, nil)
	}
	return d
}
