package templateneeds

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type fakeCatalog struct{ providers, modules map[string][]string }

func (c fakeCatalog) ProviderVersions(_ context.Context, a string) ([]string, error) {
	return c.providers[a], nil
}
func (c fakeCatalog) ModuleVersions(_ context.Context, s string) ([]string, error) {
	return c.modules[s], nil
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLacks: what a local module needs counts; versions are matched
// against constraints; what the catalog holds in a fitting version is not a
// lack; a git module always is.
func TestLacks(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"main.tf": `terraform {
  required_providers {
    coder = { source = "coder/coder", version = ">= 2.0" }
  }
}
module "local" {
  source = "./modules/local"
}
module "git" {
  source = "git::https://git.example.org/x.git"
}
`,
		"modules/local/main.tf": `module "hello" {
  source  = "registry.example.org/acme/hello/coder"
  version = "~> 1.0"
}
resource "null_resource" "x" {}
`,
	})
	needs, err := Inspect(dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	cat := fakeCatalog{
		providers: map[string][]string{"registry.terraform.io/coder/coder": {"2.20.0"}, "registry.terraform.io/hashicorp/null": {"3.2.0"}},
		modules:   map[string][]string{"registry.example.org/acme/hello/coder": {"2.0.0"}},
	}
	lacks, err := needs.Lacks(context.Background(), cat)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range lacks {
		got = append(got, l.Kind+" "+l.What+" "+l.Constraint+" @"+l.Pos)
	}
	want := []string{
		`module registry.example.org/acme/hello/coder ~> 1.0 @modules/local/main.tf:1: module "hello"`,
		`remote module git::https://git.example.org/x.git  @main.tf:9: module "git"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lacks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	msg := (&MissingError{Where: "the mirror", Lacks: lacks}).Error()
	for _, w := range []string{"module registry.example.org/acme/hello/coder ~> 1.0 (it holds only 2.0.0)", "modules:\n  - source: registry.example.org/acme/hello/coder\n    version: \"~> 1.0\"", "cannot come offline"} {
		if !strings.Contains(msg, w) {
			t.Errorf("message lacks %q:\n%s", w, msg)
		}
	}
}

// TestInspectRefusesEscapes: a local module outside the template folder.
func TestInspectRefusesEscapes(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "t")
	write(t, root, map[string]string{"t/main.tf": "module \"x\" {\n  source = \"../outside\"\n}\n", "outside/main.tf": ""})
	if _, err := Inspect(dir, dir); err == nil || !strings.Contains(err.Error(), "outside the template folder") {
		t.Fatalf("got %v, want outside the template folder", err)
	}
}

func TestExactVersion(t *testing.T) {
	for in, want := range map[string]string{"3.0.2": "3.0.2", "= 3.0.2": "3.0.2", "~> 3.0": "VERSION", ">= 1.0, < 2.0": "VERSION", "": "VERSION"} {
		if got := exactVersion(in); got != want {
			t.Errorf("exactVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
