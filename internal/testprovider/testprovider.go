// Package testprovider builds the official Coder Terraform provider
// (registry.terraform.io/coder/coder, pinned in tools/go.mod) once per test
// binary and lays it out as a filesystem mirror, for tests and benchmarks
// that run real terraform offline. It builds from the module cache only
// (GOFLAGS=-mod=mod GOPROXY=off): `make deps` downloads the module.
package testprovider

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"airgapcoder/mirror"
)

// Source and Version are the official provider's address and the version
// tools/go.mod pins; Package is its Go main package.
const (
	Source  = "registry.terraform.io/coder/coder"
	Version = "2.20.0"
	Package = "github.com/coder/terraform-provider-coder/v2"
)

var (
	once sync.Once
	dir  string
	err  error
)

// ToolsDir returns the repository's tools module folder, found from this
// source file's location.
func ToolsDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "tools")
}

// Build compiles the provider for this machine into bin.
func Build(bin string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, Package)
	cmd.Dir = ToolsDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s in %s: %v\n%s", Package, cmd.Dir, err, out)
	}
	return nil
}

// Mirror returns a filesystem mirror folder holding the official provider
// for this machine's platform.
func Mirror(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		var tmp string
		if tmp, err = os.MkdirTemp("", "provider-mirror-"); err != nil {
			return
		}
		bin := filepath.Join(tmp, "terraform-provider-coder")
		if err = Build(bin); err != nil {
			return
		}
		addr, perr := mirror.ParseProviderAddress(Source)
		if perr != nil {
			err = perr
			return
		}
		dir = filepath.Join(tmp, "mirror")
		err = mirror.AddProvider(dir, addr, Version, mirror.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}, bin)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// FakeAgentDir returns a folder serving a stand-in agent binary
// (coder-<os>-<arch>) that stays up like an agent would, for templates that
// start one.
func FakeAgentDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	script := "#!/bin/sh\n[ \"$1\" = agent ] || exit 2\n[ -n \"$CODER_AGENT_TOKEN\" ] || exit 3\nexec sleep 300\n"
	if err := os.WriteFile(filepath.Join(d, "coder-"+runtime.GOOS+"-"+runtime.GOARCH), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}
