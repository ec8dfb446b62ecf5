// Package coderprovider names the official Coder Terraform provider
// (registry.terraform.io/coder/coder) that templates use, and builds it from
// the Go module pinned in tools/go.mod, for `make build`'s mirror and for
// tests and benchmarks that run real terraform. It builds from the module
// cache only (GOPROXY=off: `make deps` downloads the module) and never lays
// out a mirror itself (package mirror does).
package coderprovider

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"

	"golang.org/x/mod/modfile"
)

// Source is the provider's address; Package is its Go main package.
const (
	Source  = "registry.terraform.io/coder/coder"
	Package = "github.com/coder/terraform-provider-coder/v2"
)

// ToolsDir is the repository's tools module folder, found from this source
// file's location (the package is only used from a checkout).
func ToolsDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "tools")
}

// Version returns the provider version tools/go.mod pins, without the "v".
func Version() (string, error) {
	path := filepath.Join(ToolsDir(), "go.mod")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the provider's pin: %w", err)
	}
	f, err := modfile.ParseLax(path, data, nil)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", path, err)
	}
	for _, r := range f.Require {
		if r.Mod.Path == Package {
			return r.Mod.Version[1:], nil
		}
	}
	return "", fmt.Errorf("%s does not require %s", path, Package)
}

var built struct {
	once sync.Once
	path string
	err  error
}

// Binary builds the provider for this machine (trimmed and stripped, as
// `make build` does) and returns the executable's path: one file per pinned
// version under the temporary folder, shared by every test binary and
// replaced atomically, so concurrent test processes never see half of it.
func Binary() (string, error) {
	built.once.Do(func() {
		version, err := Version()
		if err != nil {
			built.err = err
			return
		}
		bin := filepath.Join(os.TempDir(), fmt.Sprintf("terraform-provider-coder_%s_%s_%s", version, runtime.GOOS, runtime.GOARCH))
		tmp, err := os.CreateTemp(os.TempDir(), ".terraform-provider-coder-*")
		if err != nil {
			built.err = err
			return
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		// go build is cheap when its cache is warm, so build every time
		// rather than trust a file another checkout may have left.
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", tmp.Name(), Package)
		cmd.Dir = ToolsDir()
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build %s in %s (run make deps first): %v\n%s", Package, cmd.Dir, err, out)
			return
		}
		if err := os.Rename(tmp.Name(), bin); err != nil {
			built.err = err
			return
		}
		built.path = bin
	})
	return built.path, built.err
}
