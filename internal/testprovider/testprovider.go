// Package testprovider builds our Terraform provider once per test binary and
// lays it out as a filesystem mirror, for tests and benchmarks that run real
// terraform offline.
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
	"airgapcoder/provider"
)

// Version is the version the test mirror holds.
const Version = "0.1.0"

var (
	once sync.Once
	dir  string
	err  error
)

// Mirror returns a filesystem mirror folder holding our provider for this
// machine's platform.
func Mirror(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		var tmp string
		if tmp, err = os.MkdirTemp("", "provider-mirror-"); err != nil {
			return
		}
		bin := filepath.Join(tmp, "terraform-provider-coder")
		out, buildErr := exec.Command("go", "build", "-o", bin, "airgapcoder/cmd/terraform-provider-coder").CombinedOutput()
		if buildErr != nil {
			err = fmt.Errorf("build provider: %v\n%s", buildErr, out)
			return
		}
		addr, perr := mirror.ParseProviderAddress(provider.Address)
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
