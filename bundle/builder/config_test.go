package builder

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"airgapcoder/internal/golden"
	"airgapcoder/mirror"
)

// configDir makes a folder with the files bundle.yaml examples point at.
func configDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"templates/docker", "templates/empty", "other/docker", "providers", "pg"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{
		"templates/docker/main.tf": "terraform {}\n",
		"other/docker/main.tf":     "terraform {}\n",
		"ca.pem":                   "not checked when parsing\n",
		"notes.txt":                "x",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The running test binary is an executable of this host's platform.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(dir, "coder-host")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func hostSlash() string { return runtime.GOOS + "/" + runtime.GOARCH }

// exampleConfig is CONTRACT.md's bundle.yaml for platform, with the files
// configDir makes.
func exampleConfig(platform string) string {
	return `version: 1
name: acme-coder
release: 2026.11.1
platforms: [` + platform + `]
coder: {binary: self}
terraform: {version: 1.11.4}
postgres: {version: 16.9.0}
providers:
  - source: registry.terraform.io/coder/coder
    versions: ["2.1.0", "2.2.0-rc.1"]
  - source: hashicorp/null
    versions: ["3.2.1"]
  - {path: ./providers}
images:
  - ghcr.io/coder/envbuilder:1.0.0
  - alpine
  - alpine:3.20@sha256:0000000000000000000000000000000000000000000000000000000000000000
templates:
  - ./templates/docker
certs:
  - ./ca.pem
registries:
  registry.terraform.io: https://artifactory.corp/api/terraform/tf-remote
  Docker.io: https://mirror.corp/
`
}

func TestParseConfigExample(t *testing.T) {
	dir := configDir(t)
	yaml := exampleConfig(hostSlash())
	cfg, err := ParseConfig([]byte(yaml), "bundle.yaml", dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "acme-coder" || cfg.Release != "2026.11.1" {
		t.Errorf("name, release: got %q, %q", cfg.Name, cfg.Release)
	}
	if len(cfg.Coder) != 1 || !cfg.Coder[0].Self || cfg.Coder[0].Platform != hostPlatform() || cfg.Coder[0].Line != 5 {
		t.Errorf("coder: got %+v", cfg.Coder)
	}
	if cfg.Terraform == nil || cfg.Terraform.Version != "1.11.4" || cfg.Terraform.Path != "" {
		t.Errorf("terraform: got %+v", cfg.Terraform)
	}
	if cfg.Postgres == nil || cfg.Postgres.RepositoryURL != DefaultMavenRepository {
		t.Errorf("postgres: got %+v", cfg.Postgres)
	}
	if len(cfg.Providers) != 3 {
		t.Fatalf("providers: got %d, want 3", len(cfg.Providers))
	}
	if got := cfg.Providers[1].Source; got != (mirror.ProviderAddress{Hostname: "registry.terraform.io", Namespace: "hashicorp", Type: "null"}) {
		t.Errorf("providers[1].source: got %v", got)
	}
	if got, want := cfg.Providers[2].Path, filepath.Join(dir, "providers"); got != want {
		t.Errorf("providers[2].path: got %q, want %q", got, want)
	}
	wantImages := []string{
		"ghcr.io/coder/envbuilder:1.0.0",
		"docker.io/library/alpine:latest",
		"docker.io/library/alpine:3.20@sha256:0000000000000000000000000000000000000000000000000000000000000000",
	}
	for i, w := range wantImages {
		if cfg.Images[i].Name != w {
			t.Errorf("images[%d]: got %q, want %q", i, cfg.Images[i].Name, w)
		}
	}
	if cfg.Templates[0].Name != "docker" || cfg.Templates[0].Path != filepath.Join(dir, "templates/docker") {
		t.Errorf("templates[0]: got %+v", cfg.Templates[0])
	}
	if cfg.Certs[0].Name != "ca" {
		t.Errorf("certs[0].name: got %q, want ca", cfg.Certs[0].Name)
	}
	wantReg := map[string]string{
		"registry.terraform.io": "https://artifactory.corp/api/terraform/tf-remote/",
		"docker.io":             "https://mirror.corp/",
	}
	for k, v := range wantReg {
		if cfg.Registries[k] != v {
			t.Errorf("registries[%s]: got %q, want %q", k, cfg.Registries[k], v)
		}
	}
}

var update = flag.Bool("update", false, "rewrite the golden files")

// TestParseConfigErrors: every mistake names the file, the line and the
// field, and says what to write instead. testdata/config_errors.golden holds
// each document and the error it gives, as a user sees it; $DIR is the
// folder bundle.yaml is in. The cases use fake linux executables rather than
// this host's, so the file is the same on every host.
func TestParseConfigErrors(t *testing.T) {
	dir := configDir(t)
	fakeELF(t, filepath.Join(dir, "coder-amd64"), "amd64")
	fakeELF(t, filepath.Join(dir, "coder-amd64-copy"), "amd64")
	fakeELF(t, filepath.Join(dir, "coder-arm64"), "arm64")
	head := "version: 1\nname: acme\nrelease: \"1\"\nplatforms: [linux/amd64]\n"
	tests := []struct {
		name string
		yaml string
	}{
		{"empty", ""},
		{"syntax", "version: 1\nname: [\n"},
		{"tab", "version: 1\n\tname: x\n"},
		{"not a mapping", "- a\n"},
		{"unknown top field", head + "provider: []\n"},
		{"duplicate field", head + "name: other\n"},
		{"version 2", "version: 2\n"},
		{"missing version", "name: acme\nrelease: \"1\"\nplatforms: [linux/amd64]\n"},
		{"missing name", "version: 1\nrelease: \"1\"\nplatforms: [linux/amd64]\n"},
		{"missing platforms", "version: 1\nname: acme\nrelease: \"1\"\n"},
		{"bad name", "version: 1\nname: Acme Coder\n"},
		{"bad release", "version: 1\nname: a\nrelease: 1/2\n"},
		{"name not a string", "version: 1\nname: [a]\n"},
		{"platform syntax", "version: 1\nname: a\nrelease: \"1\"\nplatforms: [linux-amd64]\n"},
		{"unsupported platform", "version: 1\nname: a\nrelease: \"1\"\nplatforms:\n  - linux/amd64\n  - plan9/amd64\n"},
		{"duplicate platform", "version: 1\nname: a\nrelease: \"1\"\nplatforms: [linux/amd64, linux/amd64]\n"},
		{"empty platforms", "version: 1\nname: a\nrelease: \"1\"\nplatforms: []\n"},
		{"coder unknown field", head + "coder: {bianry: self}\n"},
		{"coder not self", head + "coder: {binary: mine}\n"},
		{"coder both", head + "coder: {binary: self, path: ./coder-amd64}\n"},
		{"coder self with platform", head + "coder: {binary: self, platform: linux/arm64}\n"},
		{"coder missing file", head + "coder: {path: ./nope}\n"},
		{"coder not executable", head + "coder: {path: ./notes.txt}\n"},
		{"coder wrong platform", head + "coder:\n  path: ./coder-amd64\n  platform: windows/arm64\n"},
		{"coder mismatched platform", head + "coder:\n  path: ./coder-amd64\n  platform: windows/amd64\n"},
		{"coder twice", head + "coder:\n  - {path: ./coder-amd64}\n  - {path: ./coder-amd64-copy}\n"},
		{"coder missing platform", "version: 1\nname: a\nrelease: \"1\"\nplatforms: [linux/amd64, windows/amd64]\ncoder: {path: ./coder-amd64}\n"},
		{"coder platform not listed", "version: 1\nname: a\nrelease: \"1\"\nplatforms: [linux/amd64]\ncoder:\n  - {path: ./coder-amd64}\n  - {path: ./coder-arm64}\n"},
		{"terraform bad version", head + "terraform: {version: 1.11}\n"},
		{"terraform v prefix", head + "terraform: {version: v1.11.4}\n"},
		{"terraform no version", head + "terraform: {path: ./coder-amd64}\n"},
		{"terraform missing path", head + "terraform:\n  version: 1.11.4\n  path: /nonexistent/terraform\n"},
		{"postgres bad version", head + "postgres: {version: \"16\"}\n"},
		{"postgres empty", head + "postgres: {}\n"},
		{"postgres path is a file", head + "postgres: {path: ./notes.txt}\n"},
		{"postgres repository with path", head + "postgres:\n  path: ./pg\n  repository_url: https://maven.corp/\n"},
		{"postgres http repository", head + "postgres:\n  version: 16.9.0\n  repository_url: http://maven.corp/\n"},
		{"postgres repository with a query", head + "postgres:\n  version: 16.9.0\n  repository_url: https://maven.corp/m2?token=x\n"},
		{"provider bad version", head + "providers:\n  - source: coder/coder\n    versions: [\"2.1.0\"]\n  - source: hashicorp/null\n    versions: [\"2.x\"]\n"},
		{"provider bad source", head + "providers:\n  - source: a/b/c/d\n    versions: [\"1.0.0\"]\n"},
		{"provider no versions", head + "providers:\n  - source: coder/coder\n"},
		{"provider neither source nor path", head + "providers:\n  - {}\n"},
		{"provider duplicate version", head + "providers:\n  - source: coder/coder\n    versions: [\"1.0.0\", \"1.0.0\"]\n"},
		{"provider duplicate source", head + "providers:\n  - {source: coder/coder, versions: [\"1.0.0\"]}\n  - {source: registry.terraform.io/coder/coder, versions: [\"2.0.0\"]}\n"},
		{"provider duplicate path", head + "providers:\n  - {path: ./providers}\n  - {path: ./providers}\n"},
		{"provider path and source", head + "providers:\n  - {source: coder/coder, path: ./providers}\n"},
		{"provider unknown field", head + "providers:\n  - source: coder/coder\n    version: [\"1.0.0\"]\n"},
		{"provider missing folder", head + "providers:\n  - path: ./nope\n"},
		{"providers not a list", head + "providers: {source: coder/coder}\n"},
		{"image bad", head + "images:\n  - Alpine:3.20\n"},
		{"image bad digest", head + "images:\n  - alpine@sha256:abc\n"},
		{"image not a string", head + "images:\n  - {ref: alpine}\n"},
		{"image duplicate", head + "images:\n  - alpine:3.20\n  - docker.io/library/alpine:3.20\n"},
		{"template missing", head + "templates: [./templates/nope]\n"},
		{"template is a file", head + "templates: [./notes.txt]\n"},
		{"template without tf", head + "templates: [./templates/empty]\n"},
		{"template duplicate name", head + "templates:\n  - ./templates/docker\n  - ./other/docker\n"},
		{"cert missing", head + "certs: [./nope.pem]\n"},
		{"cert is a folder", head + "certs: [./templates]\n"},
		{"cert duplicate name", head + "certs:\n  - ./ca.pem\n  - ./ca.pem\n"},
		{"registry http", head + "registries:\n  registry.terraform.io: http://plain/\n"},
		{"registry bad host", head + "registries:\n  \"https://x\": https://plain/\n"},
		{"registry duplicate", head + "registries:\n  docker.io: https://a/\n  Docker.io: https://b/\n"},
		{"registries not a mapping", head + "registries: [docker.io]\n"},
		{"module bad source", head + "modules:\n  - {source: \"git::https://x/y\", version: \"1.0.0\"}\n"},
		{"module bad constraint", head + "modules:\n  - {source: registry.coder.com/coder/code-server/coder, version: \"one\"}\n"},
		{"module no version", head + "modules:\n  - {source: registry.coder.com/coder/code-server/coder}\n"},
		{"module folder with a constraint", head + "modules:\n  - {source: acme.corp/acme/base/coder, version: \"~> 1.0\", path: .}\n"},
		{"module duplicate", head + "modules:\n  - {source: hashicorp/consul/aws, version: \"1.0.0\"}\n  - {source: registry.terraform.io/hashicorp/consul/aws, version: \"2.0.0\"}\n"},
		{"verify key missing", head + "images: [alpine]\nverify:\n  - {images: \"ghcr.io/*\", key: cosign.pub}\n"},
		{"verify not a key", head + "images: [alpine]\nverify:\n  - {images: \"docker.io/*\", key: .}\n"},
	}
	var out bytes.Buffer
	out.WriteString("# TestParseConfigErrors: each bundle.yaml (the lines after \"|\") and the error\n")
	out.WriteString("# ParseConfig gives for it. $DIR is the folder bundle.yaml is in.\n")
	for _, tt := range tests {
		_, err := ParseConfig([]byte(tt.yaml), "bundle.yaml", dir)
		var ce *ConfigError
		switch {
		case err == nil:
			t.Errorf("%s: got no error", tt.name)
			continue
		case !errors.As(err, &ce):
			t.Errorf("%s: got %T, want *ConfigError", tt.name, err)
		case ce.File != "bundle.yaml" || ce.Line < 1:
			t.Errorf("%s: got file %q line %d, want bundle.yaml and a line", tt.name, ce.File, ce.Line)
		}
		fmt.Fprintf(&out, "\n== %s\n", tt.name)
		for line := range strings.Lines(tt.yaml) {
			fmt.Fprintf(&out, "| %s", line)
		}
		fmt.Fprintf(&out, "%s\n", strings.ReplaceAll(err.Error(), dir, "$DIR"))
	}
	golden.Check(t, filepath.Join("testdata", "config_errors.golden"), out.Bytes(), *update)
}

func TestLoadConfigRelativePaths(t *testing.T) {
	dir := configDir(t)
	p := filepath.Join(dir, "bundle.yaml")
	yaml := "version: 1\nname: a\nrelease: \"1\"\nplatforms: [" + hostSlash() + "]\ntemplates: [templates/docker]\n"
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir()) // paths are relative to the file, not the working folder
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Templates[0].Path, filepath.Join(dir, "templates", "docker"); got != want {
		t.Errorf("template path: got %q, want %q", got, want)
	}
}
