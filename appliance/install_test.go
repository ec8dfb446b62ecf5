package appliance_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/appliance"
	"airgapcoder/bundle"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testtier"
)

// testBundle writes a signed bundle with a payload big enough that
// unpacking takes a moment, and returns its path and public key file.
func testBundle(t *testing.T, release string) (string, string) {
	t.Helper()
	testtier.Heavy(t, "writes a 48 MiB bundle")
	work := t.TempDir()
	payload := filepath.Join(work, "payload")
	files := map[string]int{"bin/coder-linux-amd64": 48 << 20, "templates/demo/main.tf": 0}
	for p, size := range files {
		full := filepath.Join(payload, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		data := []byte(`resource "terraform_data" "x" {}` + "\n")
		if size > 0 {
			data = make([]byte, size)
			_, _ = rand.Read(data)
		}
		if err := os.WriteFile(full, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pub, key, err := bundle.GenerateKey(filepath.Join(work, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	priv, err := bundle.LoadPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := bundle.Write(context.Background(), bundle.WriteOptions{
		PayloadDir: payload, OutputDir: out, Key: priv,
		Manifest: bundle.Manifest{Name: "test", Release: release, Platforms: []string{"linux/amd64"},
			Components: bundle.Components{Templates: []bundle.Template{{Name: "demo", Path: "templates/demo"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.Path, pub
}

// checkConsistent fails unless DIR holds either nothing installed or a
// complete current release whose files match its manifest.
func checkConsistent(t *testing.T, dir string) (installed bool) {
	t.Helper()
	l := appliance.Layout{Dir: dir}
	rel, err := l.CurrentRelease()
	if err != nil {
		t.Fatal(err)
	}
	if rel == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(l.Release(rel), "manifest.json"))
	if err != nil {
		t.Fatalf("current points at %s without a manifest: %v", rel, err)
	}
	var m bundle.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		st, err := os.Stat(filepath.Join(l.Release(rel), f.Path))
		if err != nil || st.Size() != f.Size {
			t.Fatalf("current release %s is half-installed: %s: %v", rel, f.Path, err)
		}
	}
	// The service runs the current release's own coder, so it follows
	// upgrades.
	unit, err := os.ReadFile(filepath.Join(dir, "coder-appliance.service"))
	if err != nil {
		t.Fatalf("current release %s without its systemd unit: %v", rel, err)
	}
	for line := range strings.Lines(string(unit)) {
		if exec, ok := strings.CutPrefix(line, "ExecStart="); ok {
			bin := strings.Fields(exec)[0]
			if bin != filepath.Join(l.Current(), "bin", "coder-linux-amd64") {
				t.Fatalf("the unit runs %s, want the current release's coder", bin)
			}
			if _, err := os.Stat(bin); err != nil {
				t.Fatalf("the unit's binary: %v", err)
			}
		}
	}
	return true
}

// TestInstallKilledAtRandom: kill -9 during install at random moments (ten
// runs): DIR is never half-installed and a second install succeeds.
func TestInstallKilledAtRandom(t *testing.T) {
	bin := testbin.Coder(t)
	bundlePath, pub := testBundle(t, "2026.11.1")
	// Time one whole install, then kill the others at random moments inside
	// that span.
	start := time.Now()
	if out, err := exec.Command(bin, "appliance", "install", bundlePath, "--dir", prepDir(t), "--public-key", pub).CombinedOutput(); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	span := time.Since(start)
	for i := range 10 {
		dir := prepDir(t)
		cmd := exec.Command(bin, "appliance", "install", bundlePath, "--dir", dir, "--public-key", pub)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		n, _ := rand.Int(rand.Reader, big.NewInt(span.Milliseconds()))
		time.Sleep(time.Duration(n.Int64()) * time.Millisecond) // the kill's random moment inside a real install: the subject of the test
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		killedAfterInstall := checkConsistent(t, dir)
		out, err := exec.Command(bin, "appliance", "install", bundlePath, "--dir", dir, "--public-key", pub).CombinedOutput()
		if err != nil {
			t.Fatalf("run %d (killed after %d ms): second install: %v\n%s", i, n.Int64(), err, out)
		}
		if !checkConsistent(t, dir) {
			t.Fatalf("run %d: nothing current after a successful install", i)
		}
		leftovers, _ := filepath.Glob(filepath.Join(dir, "releases", ".*"))
		if len(leftovers) > 0 {
			t.Fatalf("run %d: staging left behind: %v", i, leftovers)
		}
		t.Logf("run %d: killed after %4d ms (install had finished: %v); reinstall ok", i, n.Int64(), killedAfterInstall)
	}
}

// TestInstallRefusesBadBundles: a tampered bundle or a wrong key leaves DIR
// exactly as it was.
func TestInstallRefusesBadBundles(t *testing.T) {
	bundlePath, pub := testBundle(t, "2026.11.1")
	_, otherPub := testBundle(t, "2026.11.1")
	tampered := filepath.Join(t.TempDir(), "tampered.bundle")
	data, err := os.ReadFile(bundlePath)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(tampered, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, bundle, key string
		want              string
	}{
		{"Tampered", tampered, pub, "coder-linux-amd64"},
		{"WrongKey", bundlePath, otherPub, "not by the given public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := prepDir(t)
			k, err := bundle.LoadPublicKey(tc.key)
			if err != nil {
				t.Fatal(err)
			}
			_, err = appliance.Install(context.Background(), appliance.InstallOptions{Bundle: tc.bundle, Dir: dir, PublicKey: k})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
			var entries []string
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if p != dir && !errors.Is(err, os.ErrNotExist) {
					entries = append(entries, strings.TrimPrefix(p, dir))
				}
				return nil
			})
			for _, e := range entries {
				if e == "/"+appliance.ConfigFile { // written by the test
					continue
				}
				if !strings.HasPrefix(e, "/releases") || strings.Count(e, "/") > 1 {
					t.Fatalf("a refused install left %v in DIR", entries)
				}
			}
			if checkConsistent(t, dir) {
				t.Fatal("a refused bundle became current")
			}
		})
	}
}

// installedDir is prepDir with a test bundle of release installed in it.
func installedDir(t *testing.T, release string) string {
	t.Helper()
	bundlePath, pub := testBundle(t, release)
	dir := prepDir(t)
	k, err := bundle.LoadPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appliance.Install(context.Background(), appliance.InstallOptions{Bundle: bundlePath, Dir: dir, PublicKey: k}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// prepDir is an appliance folder whose settings listen on free ports, so
// install's port check never meets another test's server.
func prepDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "appliance")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Run as root, up runs the appliance as the service user, which must
	// reach DIR.
	for _, d := range []string{filepath.Dir(filepath.Dir(dir)), filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, appliance.ConfigFile), []byte("tls-address: 127.0.0.1:0\nhttp-address: 127.0.0.1:0\nmirror-address: 127.0.0.1:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestInstallChecksPorts: a first install refuses a port that is taken and
// says which setting to change.
func TestInstallChecksPorts(t *testing.T) {
	bundlePath, pub := testBundle(t, "2026.11.1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := prepDir(t)
	if err := os.WriteFile(filepath.Join(dir, appliance.ConfigFile), []byte("tls-address: 127.0.0.1:0\nhttp-address: "+ln.Addr().String()+"\nmirror-address: 127.0.0.1:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k, _ := bundle.LoadPublicKey(pub)
	_, err = appliance.Install(context.Background(), appliance.InstallOptions{Bundle: bundlePath, Dir: dir, PublicKey: k})
	if err == nil || !strings.Contains(err.Error(), "http-address "+ln.Addr().String()+" is not available") {
		t.Fatalf("got %v, want the taken http-address named", err)
	}
}

// TestInstallAfterUnfinishedUnpack: a release folder without its manifest
// file, as an install killed between unpacking and writing the manifest
// left it before the manifest went into the staging folder, is replaced by
// the next install instead of blocking it.
func TestInstallAfterUnfinishedUnpack(t *testing.T) {
	bundlePath, pub := testBundle(t, "2026.11.1")
	dir := prepDir(t)
	l := appliance.Layout{Dir: dir}
	unfinished := l.Release("2026.11.1")
	if err := os.MkdirAll(filepath.Join(unfinished, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unfinished, "bin", "coder-linux-amd64"), []byte("unpacked, no manifest yet"), 0o755); err != nil {
		t.Fatal(err)
	}
	k, err := bundle.LoadPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appliance.Install(context.Background(), appliance.InstallOptions{Bundle: bundlePath, Dir: dir, PublicKey: k}); err != nil {
		t.Fatalf("install over an unfinished unpack: %v", err)
	}
	if !checkConsistent(t, dir) {
		t.Fatal("nothing current after the install")
	}
}
