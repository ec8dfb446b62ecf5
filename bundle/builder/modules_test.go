package builder

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/bundle"
	"airgapcoder/internal/upstreamtest"
	"airgapcoder/mirror"
)

// TestBuildModules: registry modules cross the gap. The build resolves
// each modules: entry's constraint through the module registry protocol,
// fetches an https archive (module in a subfolder, calling a sibling folder
// of its package) and a git source over https (git http-backend; the
// build's trust and registries: overrides apply to git too), and bundles them with a local folder
// served as a module of the site's registry; a template calling the
// registry modules unchanged then runs with the real terraform against
// the mirror's module registry alone (every other connection goes to a dead
// proxy), nested registry module included. A template calling a module the
// bundle lacks, a constraint nothing meets, a bundled module whose own
// registry module is missing, and a download pointing at a folder of the
// build host each fail the build naming it.
func TestBuildModules(t *testing.T) {
	tfBin, err := exec.LookPath("terraform")
	if err != nil {
		t.Fatal("terraform is not on PATH (scripts/install-deps.sh installs it)")
	}
	e := newBuildEnv(t, upstreamtest.Options{})
	// An inherited git CA setting must not take the build's trust away.
	e.environ = []string{"GIT_SSL_CAINFO=/nonexistent/ca.pem", "PATH=" + os.Getenv("PATH")}
	template := func(t *testing.T, source, constraint string) string {
		dir := filepath.Join(t.TempDir(), "modular")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		tf := `module "hello" {
  source  = "` + source + `"
  version = "` + constraint + `"
  name    = "offline"
}

output "message" {
  value = module.hello.message
}

output "version" {
  value = module.hello.version
}
`
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(tf), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	modules := func(hello, greeting bool) string {
		s := "modules:\n"
		if hello {
			s += "  - {source: " + upstreamtest.HelloModule + ", version: \"~> 1.0\"}\n"
		}
		if greeting {
			s += "  - {source: " + upstreamtest.GreetingModule + ", version: \"2.0.0\"}\n"
		}
		return s
	}
	host := []string{"linux/amd64"}

	// And a local folder served as a registry module of the site's own.
	local := filepath.Join(t.TempDir(), "base")
	if err := os.MkdirAll(local, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(local, "main.tf"), []byte("output \"site\" {\n  value = \"acme\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl := template(t, upstreamtest.HelloModule, "~> 1.0")
	if err := os.WriteFile(filepath.Join(tmpl, "site.tf"), []byte(`module "base" {
  source  = "acme.corp/acme/base/coder"
  version = "1.0.0"
}

output "site" {
  value = module.base.site
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(t, host, modules(true, true)+"  - {source: acme.corp/acme/base/coder, version: 1.0.0, path: "+local+"}\n"+"templates:\n  - "+tmpl+"\n")
	res, err := e.build(t, cfg, t.TempDir(), e.cache)
	if err != nil {
		t.Fatal(err)
	}
	if e.up.Count("GET /git/greeting.git/info/refs") == 0 {
		t.Errorf("greeting was not cloned over https from the upstream (requests: %v)", e.up.Paths())
	}
	dir := filepath.Join(t.TempDir(), "extracted")
	m, err := bundle.Extract(context.Background(), res.Path, dir, e.pub, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []bundle.Module{
		{Source: upstreamtest.HelloModule, Version: "1.1.0", Path: bundle.ModulePath(upstreamtest.HelloModule, "1.1.0"), Subdir: "hello",
			Upstream: "https://" + upstreamtest.ModuleHost + "/modules/archives/hello-1.1.0.tar.gz//hello"},
		{Source: upstreamtest.GreetingModule, Version: "2.0.0", Path: bundle.ModulePath(upstreamtest.GreetingModule, "2.0.0")},
	}
	if len(m.Components.Modules) != 3 {
		t.Fatalf("bundled modules: %+v, want hello 1.1.0, greeting 2.0.0 and the local base 1.0.0", m.Components.Modules)
	}
	if got := m.Components.Modules[2]; got.Source != "acme.corp/acme/base/coder" || got.Version != "1.0.0" || got.Upstream != local {
		t.Errorf("the local module: %+v", got)
	}
	for i, w := range want {
		got := m.Components.Modules[i]
		if i == 1 {
			w.Upstream = "git::https://" + upstreamtest.ModuleHost + "/git/greeting.git?ref=v2.0.0"
		}
		if got != w {
			t.Errorf("module %d: got %+v, want %+v", i, got, w)
		}
	}

	// The real terraform, offline, against the mirror's module registry.
	handler, err := mirror.ModuleHandler(filepath.Join(dir, bundle.DirModules))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(mirror.ModulesPath, http.StripPrefix(strings.TrimSuffix(mirror.ModulesPath, "/"), handler))
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	rc := filepath.Join(t.TempDir(), "terraform.rc")
	cli := "disable_checkpoint = true\n"
	for _, h := range []string{upstreamtest.ModuleHost, "acme.corp"} {
		cli += "host \"" + h + "\" {\n  services = {\n    \"modules.v1\" = \"" + srv.URL + mirror.ModulesPath + h + "/\"\n  }\n}\n"
	}
	cli += "provider_installation {\n  filesystem_mirror {\n    path = \"" + filepath.Join(dir, "providers") + "\"\n  }\n}\n"
	if err := os.WriteFile(rc, []byte(cli), 0o644); err != nil {
		t.Fatal(err)
	}
	bundled := filepath.Join(dir, "templates", "modular")
	terraform := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(tfBin, args...)
		cmd.Dir = bundled
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CHECKPOINT_DISABLE=1", "TF_CLI_CONFIG_FILE=" + rc, "SSL_CERT_FILE=" + ca,
			"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=127.0.0.1"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	terraform("init", "-input=false", "-no-color")
	terraform("apply", "-auto-approve", "-input=false", "-no-color")
	if got := terraform("output", "-raw", "message"); got != upstreamtest.HelloMessage("offline") {
		t.Errorf("the module's output through the mirror: got %q, want %q", got, upstreamtest.HelloMessage("offline"))
	}
	if got := terraform("output", "-raw", "site"); got != "acme" {
		t.Errorf("the local module's output through the mirror: got %q, want acme", got)
	}
	if got := terraform("output", "-raw", "version"); got != "1.1.0" {
		t.Errorf("hello's version: got %q, want 1.1.0 (the newest that meets ~> 1.0)", got)
	}

	// What the build refuses, naming the module.
	for _, c := range []struct {
		name, body, want string
	}{
		{"template calls a module the bundle lacks", modules(true, true) + "templates:\n  - " + template(t, upstreamtest.ModuleHost+"/acme/missing/coder", "1.0.0") + "\n",
			"  - module modules.test/acme/missing/coder 1.0.0 (main.tf:1: module \"hello\")\nAdd to bundle.yaml:\nmodules:\n  - source: modules.test/acme/missing/coder\n    version: \"1.0.0\""},
		{"template wants a version not bundled", modules(true, true) + "templates:\n  - " + template(t, upstreamtest.HelloModule, "~> 2.0") + "\n",
			`  - module modules.test/acme/hello/coder ~> 2.0 (it holds only 1.1.0) (main.tf:1: module "hello")`},
		{"no version meets the entry", "modules:\n  - {source: " + upstreamtest.HelloModule + ", version: \"~> 3.0\"}\n",
			`module modules.test/acme/hello/coder: no version meets "~> 3.0" (the registry has 1.0.0, 1.1.0, 2.0.0)`},
		{"a bundled module calls one not bundled", modules(true, false),
			`module modules.test/acme/hello/coder 1.1.0: hello/main.tf:5: module "greeting": module modules.test/acme/greeting/coder (version ~> 2.0) is not in the bundle`},
		{"a registry points at the build host's files", "modules:\n  - {source: " + upstreamtest.ModuleHost + "/acme/local/coder, version: \"1.0.0\"}\n",
			`only https, ssh and user@host:path sources are bundled; a registry may not point the build at this machine's files`},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			_, err := e.build(t, e.config(t, host, c.body), out, e.cache)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
			if entries, _ := os.ReadDir(out); len(entries) != 0 {
				t.Errorf("a failed build left %d files in the output folder", len(entries))
			}
		})
	}
}
