package mirror

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"

	"airgapcoder/certs"
)

const testTemplate = `terraform {
  required_providers {
    coder = {
      source = "coder/coder"
    }
  }
}
`

// networkMirrorConfig writes a terraform CLI config whose only installation
// method is the network mirror at url.
func networkMirrorConfig(t testing.TB, url string) string {
	t.Helper()
	return writeCLIConfig(t, fmt.Sprintf("provider_installation {\n  network_mirror {\n    url = %q\n  }\n}\n", url))
}

// filesystemMirrorConfig writes a terraform CLI config whose only
// installation method is the filesystem mirror at dir.
func filesystemMirrorConfig(t testing.TB, dir string) string {
	t.Helper()
	return writeCLIConfig(t, fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path = %q\n  }\n}\n", dir))
}

func writeCLIConfig(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "terraform.rc")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// terraformInit runs `terraform init` on testTemplate in a fresh folder with
// the CLI config and extra environment, and returns the folder and stderr.
func terraformInit(t testing.TB, tfBin, cliConfig string, extraEnv []string) (string, string, error) {
	t.Helper()
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "main.tf"), []byte(testTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	tf, err := tfexec.NewTerraform(work, tfBin)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"PATH":               os.Getenv("PATH"),
		"HOME":               t.TempDir(),
		"CHECKPOINT_DISABLE": "1",
		"TF_CLI_CONFIG_FILE": cliConfig,
	}
	for _, kv := range extraEnv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if err := tf.SetEnv(env); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	tf.SetStderr(&stderr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = tf.Init(ctx)
	return work, stderr.String(), err
}

// TestTerraformInitNetworkMirror runs the real terraform against the
// mirror's provider network mirror protocol, trusting the appliance CA only
// through the certs trust store (SSL_CERT_FILE), and checks the lock file
// carries the mirror's h1: hash. Without the CA, terraform must refuse the
// mirror with an x509 error.
func TestTerraformInitNetworkMirror(t *testing.T) {
	tfBin := terraformBinary(t)
	dir := t.TempDir()
	addOurProvider(t, filepath.Join(dir, ProvidersDir))
	m := startMirror(t, dir)
	cliConfig := networkMirrorConfig(t, "https://"+m.addr+ProvidersPath)

	rel, err := ReadRelease(filepath.Join(dir, ProvidersDir), testAddr, "0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	mirrorHashes := rel.Archives[thisPlatform.String()].Hashes

	t.Run("trusting the appliance CA", func(t *testing.T) {
		work, stderr, err := terraformInit(t, tfBin, cliConfig, m.store.Env())
		if err != nil {
			t.Fatalf("terraform init: %v\n%s", err, stderr)
		}
		lock := string(readFile(t, filepath.Join(work, ".terraform.lock.hcl")))
		if !strings.Contains(lock, `provider "registry.terraform.io/coder/coder"`) || !regexp.MustCompile(`version\s*=\s*"0\.1\.0"`).MatchString(lock) {
			t.Fatalf("lock file lacks registry.terraform.io/coder/coder 0.1.0:\n%s", lock)
		}
		got := regexp.MustCompile(`"((h1|zh):[^"]+)"`).FindAllStringSubmatch(lock, -1)
		var h1s []string
		for _, g := range got {
			if !slices.Contains(mirrorHashes, g[1]) {
				t.Errorf("lock file hash %s is not one the mirror lists (%v)", g[1], mirrorHashes)
			}
			if g[2] == "h1" {
				h1s = append(h1s, g[1])
			}
		}
		if len(h1s) != 1 || h1s[0] != mirrorHashes[0] {
			t.Errorf("lock file h1: got %v, want [%s]\n%s", h1s, mirrorHashes[0], lock)
		}
	})

	t.Run("without the CA", func(t *testing.T) {
		// A trust store of the system roots only.
		other := t.TempDir()
		if err := certs.Refresh(other, certs.Options{}); err != nil {
			t.Fatal(err)
		}
		systemOnly, err := certs.Load(other)
		if err != nil {
			t.Fatal(err)
		}
		_, stderr, err := terraformInit(t, tfBin, cliConfig, systemOnly.Env())
		if err == nil {
			t.Fatal("terraform init succeeded without trusting the appliance CA")
		}
		if msg := err.Error() + stderr; !strings.Contains(msg, "x509") {
			t.Errorf("terraform init failed, but not with an x509 error:\n%s", msg)
		}
	})
}
