package bundle

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

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

// TestParseConfigErrors: every mistake names the file, the line and the
// field.
func TestParseConfigErrors(t *testing.T) {
	dir := configDir(t)
	head := "version: 1\nname: acme\nrelease: \"1\"\nplatforms: [" + hostSlash() + "]\n"
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"empty", "", "bundle.yaml:1: empty file"},
		{"syntax", "version: 1\nname: [\n", "bundle.yaml:2: did not find expected node content"},
		{"tab", "version: 1\n\tname: x\n", "bundle.yaml:2:"},
		{"not a mapping", "- a\n", "bundle.yaml:1: want a mapping"},
		{"unknown top field", head + "provider: []\n", `bundle.yaml:5: provider: unknown field (known: certs, coder`},
		{"duplicate field", head + "name: other\n", "bundle.yaml:5: name: defined twice"},
		{"version 2", "version: 2\n", `bundle.yaml:1: version: "2" is not a supported version (want 1)`},
		{"missing version", "name: acme\nrelease: \"1\"\nplatforms: [linux/amd64]\n", "bundle.yaml:1: version: missing"},
		{"missing platforms", "version: 1\nname: acme\nrelease: \"1\"\n", "bundle.yaml:1: platforms: missing"},
		{"bad name", "version: 1\nname: Acme Coder\n", `bundle.yaml:2: name: "Acme Coder" is not a bundle name`},
		{"bad release", "version: 1\nname: a\nrelease: 1/2\n", `bundle.yaml:3: release: "1/2" is not a release`},
		{"name not a string", "version: 1\nname: [a]\n", "bundle.yaml:2: name: want a non-empty string, got a list"},
		{"platform syntax", "version: 1\nname: a\nrelease: \"1\"\nplatforms: [linux-amd64]\n", `bundle.yaml:4: platforms[0]: "linux-amd64" is not a platform (want os/arch`},
		{"unsupported platform", "version: 1\nname: a\nrelease: \"1\"\nplatforms:\n  - linux/amd64\n  - plan9/amd64\n", `bundle.yaml:6: platforms[1]: "plan9/amd64" is not a supported platform`},
		{"duplicate platform", "version: 1\nname: a\nrelease: \"1\"\nplatforms: [linux/amd64, linux/amd64]\n", "bundle.yaml:4: platforms[1]: linux/amd64 is listed twice"},
		{"empty platforms", "version: 1\nname: a\nrelease: \"1\"\nplatforms: []\n", "bundle.yaml:4: platforms: empty"},
		{"coder unknown field", head + "coder: {bianry: self}\n", "bundle.yaml:5: coder.bianry: unknown field (known: binary, path, platform)"},
		{"coder not self", head + "coder: {binary: mine}\n", `bundle.yaml:5: coder.binary: "mine" is not a binary source`},
		{"coder both", head + "coder: {binary: self, path: ./coder-host}\n", "bundle.yaml:5: coder: binary and path exclude each other"},
		{"coder missing file", head + "coder: {path: ./nope}\n", "bundle.yaml:5: coder.path: ./nope: no such file"},
		{"coder not executable", head + "coder: {path: ./notes.txt}\n", "bundle.yaml:5: coder.path: " + filepath.Join(dir, "notes.txt") + " is not an executable"},
		{"coder wrong platform", head + "coder:\n  path: ./coder-host\n  platform: windows/arm64\n", `bundle.yaml:7: coder.platform: "windows/arm64" is not a supported platform`},
		{"coder mismatched platform", head + "coder:\n  path: ./coder-host\n  platform: windows/amd64\n", "bundle.yaml:7: coder.platform: ./coder-host is a " + hostSlash() + " executable, not windows/amd64"},
		{"coder twice", head + "coder:\n  - {binary: self}\n  - {path: ./coder-host}\n", "bundle.yaml:7: coder[1]: a second coder binary for " + hostSlash() + " (the first is at line 6)"},
		{"coder missing platform", "version: 1\nname: a\nrelease: \"1\"\nplatforms: [" + hostSlash() + ", windows/amd64]\ncoder: {binary: self}\n", "bundle.yaml:5: coder: no binary for windows/amd64"},
		{"terraform bad version", head + "terraform: {version: 1.11}\n", `bundle.yaml:5: terraform.version: "1.11" is not a version`},
		{"terraform v prefix", head + "terraform: {version: v1.11.4}\n", `bundle.yaml:5: terraform.version: "v1.11.4" is not a version`},
		{"terraform no version", head + "terraform: {path: ./coder-host}\n", "bundle.yaml:5: terraform.version: missing"},
		{"terraform missing path", head + "terraform:\n  version: 1.11.4\n  path: /nonexistent/terraform\n", "bundle.yaml:7: terraform.path: /nonexistent/terraform: no such file"},
		{"postgres bad version", head + "postgres: {version: \"16\"}\n", `bundle.yaml:5: postgres.version: "16" is not a version`},
		{"postgres empty", head + "postgres: {}\n", "bundle.yaml:5: postgres: want {version: X.Y.Z} or {path"},
		{"postgres path is a file", head + "postgres: {path: ./notes.txt}\n", "bundle.yaml:5: postgres.path: ./notes.txt is not a folder"},
		{"postgres repository with path", head + "postgres:\n  path: ./pg\n  repository_url: https://maven.corp/\n", "bundle.yaml:7: postgres.repository_url: only for {version}"},
		{"postgres http repository", head + "postgres:\n  version: 16.9.0\n  repository_url: http://maven.corp/\n", `bundle.yaml:7: postgres.repository_url: "http://maven.corp/": want an https URL`},
		{"provider bad version", head + "providers:\n  - source: coder/coder\n    versions: [\"2.1.0\"]\n  - source: hashicorp/null\n    versions: [\"2.x\"]\n", `bundle.yaml:9: providers[1].versions[0]: "2.x" is not a version`},
		{"provider bad source", head + "providers:\n  - source: a/b/c/d\n    versions: [\"1.0.0\"]\n", `bundle.yaml:6: providers[0].source: "a/b/c/d" is not a provider source address`},
		{"provider no versions", head + "providers:\n  - source: coder/coder\n", "bundle.yaml:6: providers[0].versions: missing or empty"},
		{"provider duplicate version", head + "providers:\n  - source: coder/coder\n    versions: [\"1.0.0\", \"1.0.0\"]\n", `bundle.yaml:7: providers[0].versions[1]: "1.0.0" is listed twice`},
		{"provider duplicate source", head + "providers:\n  - {source: coder/coder, versions: [\"1.0.0\"]}\n  - {source: registry.terraform.io/coder/coder, versions: [\"2.0.0\"]}\n", "bundle.yaml:7: providers[1].source: registry.terraform.io/coder/coder is listed twice (first at line 6)"},
		{"provider path and source", head + "providers:\n  - {source: coder/coder, path: ./providers}\n", "bundle.yaml:6: providers[0]: path excludes source and versions"},
		{"provider unknown field", head + "providers:\n  - source: coder/coder\n    version: [\"1.0.0\"]\n", "bundle.yaml:7: providers[0].version: unknown field (known: path, source, versions)"},
		{"provider missing folder", head + "providers:\n  - path: ./nope\n", "bundle.yaml:6: providers[0].path: ./nope: no such folder"},
		{"providers not a list", head + "providers: {source: coder/coder}\n", "bundle.yaml:5: providers: want a list, got a mapping"},
		{"image bad", head + "images:\n  - Alpine:3.20\n", `bundle.yaml:6: images[0]: "Alpine:3.20" is not an image reference`},
		{"image bad digest", head + "images:\n  - alpine@sha256:abc\n", `bundle.yaml:6: images[0]: "alpine@sha256:abc" is not an image reference`},
		{"image duplicate", head + "images:\n  - alpine:3.20\n  - docker.io/library/alpine:3.20\n", "bundle.yaml:7: images[1]: docker.io/library/alpine:3.20 is listed twice (first at line 6 as alpine:3.20)"},
		{"template missing", head + "templates: [./templates/nope]\n", "bundle.yaml:5: templates[0]: ./templates/nope: no such folder"},
		{"template without tf", head + "templates: [./templates/empty]\n", "bundle.yaml:5: templates[0]: ./templates/empty holds no .tf file"},
		{"template duplicate name", head + "templates:\n  - ./templates/docker\n  - ./other/docker\n", `bundle.yaml:7: templates[1]: a second template named "docker" (the first is at line 6)`},
		{"cert missing", head + "certs: [./nope.pem]\n", "bundle.yaml:5: certs[0]: ./nope.pem: no such file"},
		{"registry http", head + "registries:\n  registry.terraform.io: http://plain/\n", `bundle.yaml:6: registries.registry.terraform.io: "http://plain/": want an https URL`},
		{"registry bad host", head + "registries:\n  \"https://x\": https://plain/\n", `bundle.yaml:6: registries.https://x: "https://x" is not a host name`},
		{"registry duplicate", head + "registries:\n  docker.io: https://a/\n  Docker.io: https://b/\n", "bundle.yaml:7: registries.Docker.io: defined twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.yaml), "bundle.yaml", dir)
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("got %T, want *ConfigError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got  %q\nwant %q", err, tt.want)
			}
		})
	}
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
