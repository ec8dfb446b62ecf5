package cli_test

import (
	"encoding/json"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"airgapcoder/bundle"
	"airgapcoder/internal/testfs"
	"airgapcoder/internal/upstreamtest"
)

// TestBundleBuild runs coder bundle build through cli.Main: a mistake in
// bundle.yaml is a usage error (exit 2) naming its line and field; a build
// against the test upstream writes a split, signed bundle that verify
// accepts.
func TestBundleBuild(t *testing.T) {
	dir := t.TempDir()
	host := runtime.GOOS + "/" + runtime.GOARCH
	head := "version: 1\nname: cli\nrelease: \"1\"\nplatforms: [" + host + "]\n"

	bad := testfs.WriteFile(t, dir, "bad.yaml", head+"providers:\n  - source: registry.terraform.io/coder/coder\n    versions: [\"2.x\"]\n")
	code, _, stderr := runMain(t, nil, "bundle", "build", "-f", bad, "--cache-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, `bad.yaml:7: providers[0].versions[0]: "2.x" is not a version`) {
		t.Errorf("bad bundle.yaml: exit %d, stderr %q; want 2 and the line and field", code, stderr)
	}
	code, _, stderr = runMain(t, nil, "bundle", "build", "-f", filepath.Join(dir, "nope.yaml"))
	if code != 2 || !strings.Contains(stderr, "nope.yaml: no such file") {
		t.Errorf("missing bundle.yaml: exit %d, stderr %q; want 2", code, stderr)
	}
	code, _, stderr = runMain(t, nil, "bundle", "build", "-f", bad, "--split", "lots")
	if code != 2 || !strings.Contains(stderr, "--split lots") {
		t.Errorf("bad --split: exit %d, stderr %q; want 2 naming the flag", code, stderr)
	}

	up := upstreamtest.New(t, upstreamtest.Options{ProviderPlatforms: []string{runtime.GOOS + "_" + runtime.GOARCH}})
	good := testfs.WriteFile(t, dir, "bundle.yaml", head+
		"providers:\n  - source: registry.terraform.io/coder/coder\n    versions: [\"2.20.0\"]\n"+
		"images: [images.test/team/tool:2]\nverify:\n  - images: images.test/team/*\n    key: "+up.CosignKeyFile+"\n"+
		"modules:\n  - {source: "+upstreamtest.HelloModule+", version: \"~> 1.0\"}\n  - {source: "+upstreamtest.GreetingModule+", version: \"2.0.0\"}\n"+
		"certs: ["+up.CAFile+"]\nregistries:\n  registry.terraform.io: "+up.URL+"\n  images.test: "+up.URL+"\n  "+upstreamtest.ModuleHost+": "+up.URL+"\n")
	if code, out, stderr := runMain(t, nil, "bundle", "keygen", "--output", filepath.Join(dir, "keys")); code != 0 {
		t.Fatalf("keygen: exit %d\n%s%s", code, out, stderr)
	}
	// The public half as --sign-key is a usage error that says which file to pass.
	pub := filepath.Join(dir, "keys", "bundle.pub")
	code, _, stderr = runMain(t, nil, "bundle", "build", "-f", good, "--sign-key", pub, "--cache-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "private key "+pub+": holds a PUBLIC KEY, want a PRIVATE KEY: pass bundle.key, not bundle.pub") {
		t.Errorf("bundle.pub as --sign-key: exit %d, stderr %q; want 2 naming the file and what to pass", code, stderr)
	}
	out := filepath.Join(dir, "out")
	code, stdout, stderr := runMain(t, nil, "bundle", "build", "-f", good, "--output", out,
		"--sign-key", filepath.Join(dir, "keys", "bundle.key"), "--split", "4MiB", "--cache-dir", t.TempDir())
	if code != 0 {
		t.Fatalf("bundle build: exit %d\n%s\n%s", code, stdout, stderr)
	}
	first := strings.SplitN(stdout, "\n", 2)[0]
	if first != filepath.Join(out, "cli-1.bundle.part000") || !strings.Contains(stdout, "sha256 ") {
		t.Errorf("bundle build printed %q; want the part index path, the parts and the sha256", stdout)
	}
	if !strings.Contains(stderr, "provider registry.terraform.io/coder/coder 2.20.0") {
		t.Errorf("bundle build's log does not mention the provider:\n%s", stderr)
	}
	code, stdout, stderr = runMain(t, nil, "bundle", "verify", first, "--public-key", filepath.Join(dir, "keys", "bundle.pub"))
	if code != 0 {
		t.Fatalf("bundle verify: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// --against an inventory that cannot be a base: usage errors that say why.
	m, _, err := bundle.Inspect(first)
	if err != nil {
		t.Fatal(err)
	}
	writeInventory := func(name string, m bundle.Manifest) string {
		b, err := json.Marshal(bundle.NewInventory(m))
		if err != nil {
			t.Fatal(err)
		}
		return testfs.WriteFile(t, dir, name, string(b))
	}
	other := m
	other.Name = "another"
	for _, c := range []struct{ inventory, want string }{
		{writeInventory("same.json", m), "the site already runs release 1; change release: in bundle.yaml"},
		{writeInventory("other.json", other), `the site runs bundle "another", bundle.yaml builds "cli"`},
		{testfs.WriteFile(t, dir, "junk.json", "{"), "write one with coder appliance inventory"},
	} {
		code, _, stderr = runMain(t, nil, "bundle", "build", "-f", good, "--against", c.inventory, "--cache-dir", t.TempDir())
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("--against %s: exit %d, stderr %q; want 2 saying %q", filepath.Base(c.inventory), code, stderr, c.want)
		}
	}
	// inspect lists what came along with the image, and what was verified.
	code, stdout, stderr = runMain(t, nil, "bundle", "inspect", first)
	if code != 0 {
		t.Fatalf("bundle inspect: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !slices.ContainsFunc(strings.Split(stdout, "\n"), func(l string) bool {
		f := strings.Fields(l)
		return len(f) > 2 && f[0] == "module" && f[1] == upstreamtest.HelloModule && f[2] == "1.1.0"
	}) {
		t.Errorf("bundle inspect lists no module %s 1.1.0:\n%s", upstreamtest.HelloModule, stdout)
	}
	for _, want := range []string{
		"cosign tag " + up.Signed.SignatureTag + ", verified with " + up.CosignKeyFile,
		"referrer (application/vnd.dev.cosign.artifact.sig.v1+json), verified with " + up.CosignKeyFile,
		"referrer (application/spdx+json)",
		"(module in hello/)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("bundle inspect does not say %q:\n%s", want, stdout)
		}
	}
}
