// Package testbin builds the product's binaries once per test binary, for
// tests that run them as real processes, and runs one in the background
// with its output captured ([Start]). The binaries are removed when the
// test binary ends, through RemoveAll in its TestMain (coderdtest.RunMain
// calls it).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"airgapcoder/internal/testtier"
)

type result struct {
	path string
	err  error
}

var (
	mu    sync.Mutex
	built = map[string]*result{}
)

// Build builds the main package pkg with ldflags (may be empty) once and
// returns the binary's path.
func Build(t testing.TB, pkg, ldflags string) string {
	t.Helper()
	testtier.Heavy(t, "builds a binary with go build")
	key := pkg + "\x00" + ldflags
	mu.Lock()
	defer mu.Unlock()
	r, ok := built[key]
	if !ok {
		r = &result{}
		built[key] = r
		dir, err := os.MkdirTemp("", "testbin-")
		if err == nil {
			// Other accounts run it too: appliance up as root runs the
			// appliance as its service user.
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			r.err = err
		} else {
			r.path = filepath.Join(dir, filepath.Base(pkg))
			args := []string{"build", "-o", r.path}
			if ldflags != "" {
				args = append(args, "-ldflags", ldflags)
			}
			if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
				r.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			}
		}
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

// RemoveAll removes every binary built so far; Build builds them again if
// asked after.
func RemoveAll() {
	mu.Lock()
	defer mu.Unlock()
	for key, r := range built {
		if r.path != "" {
			os.RemoveAll(filepath.Dir(r.path))
		}
		delete(built, key)
	}
}

// Coder is the coder binary.
func Coder(t testing.TB) string { return Build(t, "airgapcoder/cmd/coder", "") }
