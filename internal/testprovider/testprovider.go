// Package testprovider lays out the official Coder Terraform provider
// (built by package coderprovider) as a filesystem mirror once per test
// binary, for tests and benchmarks that run real terraform offline.
package testprovider

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"airgapcoder/internal/coderprovider"
	"airgapcoder/internal/testtier"
	"airgapcoder/mirror"
)

var (
	once    sync.Once
	dir     string
	version string
	err     error
)

// Mirror returns a filesystem mirror folder holding the official provider
// for this machine's platform.
func Mirror(t testing.TB) string {
	t.Helper()
	testtier.Heavy(t, "builds the Coder Terraform provider")
	once.Do(func() {
		var bin, tmp string
		if version, err = coderprovider.Version(); err != nil {
			return
		}
		if bin, err = coderprovider.Binary(); err != nil {
			return
		}
		if tmp, err = os.MkdirTemp("", "provider-mirror-"); err != nil {
			return
		}
		addr, perr := mirror.ParseProviderAddress(coderprovider.Source)
		if perr != nil {
			err = perr
			return
		}
		dir = filepath.Join(tmp, "mirror")
		err = mirror.AddProvider(dir, addr, version, mirror.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}, bin)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// RemoveAll removes the mirror folder, when the test binary ends
// (coderdtest.RunMain calls it).
func RemoveAll() {
	if dir != "" {
		os.RemoveAll(filepath.Dir(dir))
	}
}

// Version is the provider version Mirror holds.
func Version(t testing.TB) string {
	t.Helper()
	Mirror(t)
	return version
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
