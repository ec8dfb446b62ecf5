package upstreamtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The module registry (modules.v1 at /v1/modules/), for the host
// ModuleHost. It holds:
//
//   - ModuleHost/acme/hello/coder 1.0.0, 1.1.0 and 2.0.0: an https tar.gz
//     package whose module is in its "hello" folder (X-Terraform-Get ends in
//     "//hello") and calls a sibling folder of the package ("../shared")
//     and the registry module greeting (version "~> 2.0");
//   - ModuleHost/acme/greeting/coder 2.0.0: a git:: source, a repository
//     served over https by git http-backend at /git/greeting.git (tag
//     v2.0.0);
//   - ModuleHost/acme/local/coder 1.0.0: a download that points at a folder
//     of the build host (git::file://), which builds must refuse.
//
// hello's output "message" is HelloMessage(name) for its input "name".
const (
	ModuleHost  = "modules.test"
	HelloModule = ModuleHost + "/acme/hello/coder"
	// GreetingModule is what hello calls.
	GreetingModule = ModuleHost + "/acme/greeting/coder"
)

// HelloVersions are the versions of HelloModule the registry offers.
var HelloVersions = []string{"1.0.0", "1.1.0", "2.0.0"}

// HelloMessage is hello's output "message" for input name.
func HelloMessage(name string) string { return "hello, " + name + " (greeting 2.0.0, shared)" }

func (u *Upstream) setupModules(mux *http.ServeMux, work string) error {
	repo := filepath.Join(work, "greeting.git")
	if err := gitRepo(repo, map[string]string{
		"main.tf": `variable "name" {
  type = string
}

output "text" {
  value = "hello, ${var.name} (greeting 2.0.0"
}
`,
	}, "v2.0.0"); err != nil {
		return fmt.Errorf("greeting module repository: %w", err)
	}
	archives := map[string][]byte{}
	for _, v := range HelloVersions {
		tgz, err := tarGz(map[string]string{
			"hello/main.tf": `variable "name" {
  type = string
}

module "greeting" {
  source  = "` + GreetingModule + `"
  version = "~> 2.0"
  name    = var.name
}

module "shared" {
  source = "../shared"
}

output "message" {
  value = "${module.greeting.text}, ${module.shared.word})"
}

output "version" {
  value = "` + v + `"
}
`,
			"shared/main.tf": `output "word" {
  value = "shared"
}
`,
			"README.md": "hello " + v + "\n",
		})
		if err != nil {
			return err
		}
		archives[v] = tgz
	}
	mux.HandleFunc("GET /v1/modules/acme/{name}/coder/versions", func(w http.ResponseWriter, r *http.Request) {
		var vs []string
		switch r.PathValue("name") {
		case "hello":
			vs = HelloVersions
		case "greeting":
			vs = []string{"2.0.0"}
		case "local":
			vs = []string{"1.0.0"}
		default:
			http.NotFound(w, r)
			return
		}
		var list []map[string]string
		for _, v := range vs {
			list = append(list, map[string]string{"version": v})
		}
		writeJSON(w, map[string]any{"modules": []any{map[string]any{"versions": list}}})
	})
	mux.HandleFunc("GET /v1/modules/acme/{name}/coder/{version}/download", func(w http.ResponseWriter, r *http.Request) {
		v := r.PathValue("version")
		switch {
		case r.PathValue("name") == "hello" && slices.Contains(HelloVersions, v):
			w.Header().Set("X-Terraform-Get", "/modules/archives/hello-"+v+".tar.gz//hello")
		case r.PathValue("name") == "greeting" && v == "2.0.0":
			w.Header().Set("X-Terraform-Get", "git::https://"+ModuleHost+"/git/greeting.git?ref=v2.0.0")
		case r.PathValue("name") == "local" && v == "1.0.0":
			w.Header().Set("X-Terraform-Get", "git::file://"+repo+"?ref=v2.0.0")
		default:
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	gitBin, err := exec.LookPath("git")
	if err != nil {
		return err
	}
	mux.Handle("/git/", &cgi.Handler{Path: gitBin, Args: []string{"http-backend"}, Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + work, "GIT_HTTP_EXPORT_ALL=1"}, Logger: nopLogger()})
	mux.HandleFunc("GET /modules/archives/{file}", func(w http.ResponseWriter, r *http.Request) {
		v, ok := strings.CutPrefix(strings.TrimSuffix(r.PathValue("file"), ".tar.gz"), "hello-")
		data, found := archives[v]
		if !ok || !found {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/gzip")
		w.Write(data)
	})
	return nil
}

// tarGz packs files (path → content) into a tar.gz.
func tarGz(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gitRepo makes a git repository at dir with files committed and tagged.
func gitRepo(dir string, files map[string]string, tag string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
			return err
		}
	}
	env := append(os.Environ(), "GIT_AUTHOR_NAME=upstreamtest", "GIT_AUTHOR_EMAIL=upstreamtest@invalid", "GIT_COMMITTER_NAME=upstreamtest",
		"GIT_COMMITTER_EMAIL=upstreamtest@invalid", "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	for _, args := range [][]string{
		{"init", "--quiet", "--initial-branch", "main"},
		{"add", "."},
		{"commit", "--quiet", "-m", "greeting 2.0.0"},
		{"tag", tag},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", args[0], err, out)
		}
	}
	return nil
}

// QuickstartTemplate has the shapes of Coder's Docker quickstart template:
// it requires coder/coder (which the tests' mirrors carry) and
// kreuzwerker/docker, implies hashicorp/external, and calls the module
// registry.coder.com/coder/code-server/coder "~> 1.0", none of which any
// test bundle or mirror carries.
const QuickstartTemplate = `terraform {
  required_providers {
    coder  = { source = "coder/coder" }
    docker = { source = "kreuzwerker/docker" }
  }
}

data "coder_workspace" "me" {}

resource "docker_volume" "home" {
  name = "coder-${data.coder_workspace.me.id}-home"
}

data "external" "git" {
  program = ["sh", "-c", "echo {}"]
}

module "code-server" {
  source   = "registry.coder.com/coder/code-server/coder"
  version  = "~> 1.0"
  agent_id = "x"
}
`
