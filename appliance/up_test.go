package appliance_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/appliance"
	"airgapcoder/bundle"
	"airgapcoder/internal/testbin"
)

// TestUpFailsWhenMirrorPortTaken: a mirror port another process holds
// makes `appliance up` exit at once with the address named (it used to
// hang with nothing logged).
func TestUpFailsWhenMirrorPortTaken(t *testing.T) {
	bundlePath, pub := testBundle(t, "2026.11.1")
	dir := prepDir(t)
	k, _ := bundle.LoadPublicKey(pub)
	if _, err := appliance.Install(context.Background(), appliance.InstallOptions{Bundle: bundlePath, Dir: dir, PublicKey: k}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// An external database that is never reached: the mirror starts first.
	cfg := "tls-address: 127.0.0.1:0\nhttp-address: 127.0.0.1:0\nmirror-address: " + ln.Addr().String() + "\npostgres-url: postgres://coder@127.0.0.1:1/coder\n"
	if err := os.WriteFile(filepath.Join(dir, appliance.ConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, testbin.Coder(t), "appliance", "up", "--dir", dir).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("appliance up still running after %s with the mirror port taken:\n%s", time.Since(start).Round(time.Second), out)
	}
	if err == nil || !strings.Contains(string(out), "mirror: listen") || !strings.Contains(string(out), ln.Addr().String()) {
		t.Fatalf("got %v:\n%s\nwant a failure naming the mirror address %s", err, out, ln.Addr())
	}
}
