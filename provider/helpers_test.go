package provider

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"

	"airgapcoder/mirror"
)

// testVersion is the version the tests pack the provider as.
const testVersion = "0.1.0"

var (
	buildOnce sync.Once
	buildErr  error
	sharedDir string // holds the provider binary, its mirror and the CLI config; removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// cliConfig builds the provider once per test binary (go build into a
// temporary folder), packs it into a filesystem mirror with package mirror,
// and returns the path of a CLI config that installs coder.internal/*/* from
// that mirror only (no direct block: nothing else is installable).
func cliConfig(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		sharedDir, buildErr = os.MkdirTemp("", "provider-test-")
		if buildErr != nil {
			return
		}
		buildErr = buildMirror(sharedDir)
	})
	if buildErr != nil {
		t.Fatalf("build the provider mirror: %v", buildErr)
	}
	return filepath.Join(sharedDir, "terraform.rc")
}

func buildMirror(dir string) error {
	bin := filepath.Join(dir, "terraform-provider-coder")
	// go test puts its own toolchain first on PATH.
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -X main.version="+testVersion,
		"-o", bin, "airgapcoder/cmd/terraform-provider-coder")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	addr, err := mirror.ParseProviderAddress(Address)
	if err != nil {
		return err
	}
	providers := filepath.Join(dir, "providers")
	if err := mirror.AddProvider(providers, addr, testVersion, mirror.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}, bin); err != nil {
		return err
	}
	rc := fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = ["coder.internal/*/*"]
  }
}
`, providers)
	return os.WriteFile(filepath.Join(dir, "terraform.rc"), []byte(rc), 0o644)
}

func terraformBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TERRAFORM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("terraform"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/local/bin/terraform"); err == nil {
		return "/usr/local/bin/terraform"
	}
	t.Fatal("terraform not found (set TERRAFORM or put it on PATH; make test checks it is installed)")
	return ""
}

// tfDir is a Terraform working folder with its own environment.
type tfDir struct {
	t   *testing.T
	dir string
	env map[string]string // CODER_* variables for the provider
	rc  string
	bin string
}

// newTFDir writes mainTF into a new folder and runs terraform init there.
func newTFDir(t *testing.T, mainTF string, env map[string]string) *tfDir {
	t.Helper()
	d := &tfDir{t: t, dir: t.TempDir(), env: env, rc: cliConfig(t), bin: terraformBinary(t)}
	d.write(mainTF)
	if err := d.tf().Init(d.ctx()); err != nil {
		t.Fatalf("terraform init: %v", err)
	}
	return d
}

func (d *tfDir) write(mainTF string) {
	d.t.Helper()
	if err := os.WriteFile(filepath.Join(d.dir, "main.tf"), []byte(mainTF), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

func (d *tfDir) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	d.t.Cleanup(cancel)
	return ctx
}

// tf returns a fresh *tfexec.Terraform: SetEnv replaces the whole
// environment, and the *JSON calls keep writers attached.
func (d *tfDir) tf() *tfexec.Terraform {
	d.t.Helper()
	tf, err := tfexec.NewTerraform(d.dir, d.bin)
	if err != nil {
		d.t.Fatal(err)
	}
	env := map[string]string{
		"PATH":               os.Getenv("PATH"),
		"HOME":               d.dir,
		"CHECKPOINT_DISABLE": "1",
		"TF_CLI_CONFIG_FILE": d.rc,
	}
	for k, v := range d.env {
		env[k] = v
	}
	if err := tf.SetEnv(env); err != nil {
		d.t.Fatal(err)
	}
	return tf
}

func (d *tfDir) apply(opts ...tfexec.ApplyOption) {
	d.t.Helper()
	if err := d.tf().Apply(d.ctx(), opts...); err != nil {
		d.t.Fatalf("terraform apply: %v", err)
	}
}

// output decodes the output name into v.
func (d *tfDir) output(name string, v any) {
	d.t.Helper()
	outs, err := d.tf().Output(d.ctx())
	if err != nil {
		d.t.Fatalf("terraform output: %v", err)
	}
	o, ok := outs[name]
	if !ok {
		d.t.Fatalf("no output %q", name)
	}
	if err := json.Unmarshal(o.Value, v); err != nil {
		d.t.Fatalf("decode output %s: %v", name, err)
	}
}

func (d *tfDir) show() *tfjson.State {
	d.t.Helper()
	st, err := d.tf().Show(d.ctx())
	if err != nil {
		d.t.Fatalf("terraform show: %v", err)
	}
	return st
}

// stateResource returns the attribute values of the resource at address in st.
func stateResource(t *testing.T, st *tfjson.State, address string) map[string]any {
	t.Helper()
	if st.Values != nil {
		for _, r := range st.Values.RootModule.Resources {
			if r.Address == address {
				return r.AttributeValues
			}
		}
	}
	t.Fatalf("no %s in the state", address)
	return nil
}

// fakeControlPlane serves /bin/coder-linux-amd64 over TLS as a shell script
// that records how it was started in the file $MARKER (and copies
// $SSL_CERT_FILE to $MARKER.ca). The first failFirst requests get 503, as
// from a control plane that is still starting.
type fakeControlPlane struct {
	URL      string
	CAFile   string // the server's self-signed certificate, PEM
	CAPEM    string
	requests atomic.Int32
}

const fakeAgent = `#!/bin/sh
{
	echo "args=$*"
	echo "url=$CODER_AGENT_URL"
	echo "token=$CODER_AGENT_TOKEN"
	echo "cert=${SSL_CERT_FILE:-}"
} >"$MARKER"
if [ -n "${SSL_CERT_FILE:-}" ]; then cat "$SSL_CERT_FILE" >"$MARKER.ca"; fi
`

func newFakeControlPlane(t *testing.T, failFirst int32, alwaysFail bool) *fakeControlPlane {
	t.Helper()
	cp := &fakeControlPlane{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cp.requests.Add(1)
		if alwaysFail || n <= failFirst {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/bin/coder-linux-amd64" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(fakeAgent))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake failures are expected
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cp.URL = srv.URL
	cp.CAPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	cp.CAFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(cp.CAFile, []byte("# the test CA\n"+cp.CAPEM), 0o644); err != nil {
		t.Fatal(err)
	}
	return cp
}

// runInitScript runs script with sh as a workspace would, with the agent
// token in the environment and PATH as given, and returns what the fake
// agent recorded (empty when it did not run), with the script's stderr.
func runInitScript(t *testing.T, script, path string, extraEnv ...string) (marker map[string]string, markerCA string, stderr string, err error) {
	t.Helper()
	dir := t.TempDir()
	scriptPath := filepath.Join(dir, "init.sh")
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	markerPath := filepath.Join(dir, "marker")
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, sh, scriptPath)
	cmd.Env = append([]string{
		"PATH=" + path,
		"HOME=" + dir,
		"TMPDIR=" + tmp,
		"MARKER=" + markerPath,
		"CODER_AGENT_TOKEN=secret-token",
	}, extraEnv...)
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	err = cmd.Run()
	marker = map[string]string{}
	if b, rerr := os.ReadFile(markerPath); rerr == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			k, v, _ := strings.Cut(line, "=")
			marker[k] = v
		}
	}
	if b, rerr := os.ReadFile(markerPath + ".ca"); rerr == nil {
		markerCA = string(b)
	}
	return marker, markerCA, errBuf.String(), err
}
