package cli_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/bundle"
	"airgapcoder/cli"
)

// bundleFixture is a key pair made by `coder bundle keygen` and bundles
// signed with it, made by bundle.Write.
type bundleFixture struct {
	dir             string
	pub, key        string // key file paths
	otherPub        string // a key that signed nothing
	signed, split   string // bundle paths (split: its .part000)
	unsigned        string
	tampered        string // signed, one payload byte flipped
	missingPart     string // split, .part002 removed
	tamperedFile    string // the payload path tampered names
	missingPartName string
}

func newBundleFixture(t *testing.T) *bundleFixture {
	t.Helper()
	dir := t.TempDir()
	f := &bundleFixture{dir: dir}
	code, stdout, stderr := runMain(t, nil, "bundle", "keygen", "--output", filepath.Join(dir, "keys"))
	if code != 0 || !strings.Contains(stdout, "Key ID:") {
		t.Fatalf("bundle keygen: exit %d\n%s\n%s", code, stdout, stderr)
	}
	f.pub, f.key = filepath.Join(dir, "keys", "bundle.pub"), filepath.Join(dir, "keys", "bundle.key")
	if _, _, err := bundle.GenerateKey(filepath.Join(dir, "other")); err != nil {
		t.Fatal(err)
	}
	f.otherPub = filepath.Join(dir, "other", "bundle.pub")
	priv, err := bundle.LoadPrivateKey(f.key)
	if err != nil {
		t.Fatal(err)
	}

	payload := filepath.Join(dir, "payload")
	coder := []byte(strings.Repeat("coder binary ", 20_000))
	tf := []byte(strings.Repeat("terraform binary ", 20_000))
	files := map[string][]byte{
		bundle.CoderPath("linux/amd64"):     coder,
		bundle.TerraformPath("linux/amd64"): tf,
		"templates/docker/main.tf":          []byte("resource \"coder_agent\" \"main\" {}\n"),
		"providers/registry.terraform.io/coder/coder/terraform-provider-coder_2.1.0_linux_amd64.zip": bytes.Repeat([]byte{0x50, 0x4b, 1, 2}, 30_000),
	}
	for p, data := range files {
		full := filepath.Join(payload, filepath.FromSlash(p))
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := bundle.Manifest{
		Name: "acme-coder", Release: "2026.11.1", BuildTime: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), Platforms: []string{"linux/amd64"},
		Components: bundle.Components{
			Coder:     []bundle.Binary{{Platform: "linux/amd64", Path: bundle.CoderPath("linux/amd64"), Version: "v2.99.0"}},
			Terraform: &bundle.Terraform{Version: "1.11.4", Source: "local", Binaries: []bundle.Binary{{Platform: "linux/amd64", Path: bundle.TerraformPath("linux/amd64"), Version: "1.11.4"}}},
			Providers: []bundle.Provider{{Source: "registry.terraform.io/coder/coder", Version: "2.1.0", Platforms: []string{"linux/amd64"}}},
			Templates: []bundle.Template{{Name: "docker", Path: bundle.TemplatePath("docker")}},
		},
	}
	write := func(name string, key ed25519.PrivateKey, split int64) bundle.Result {
		t.Helper()
		out := filepath.Join(dir, name)
		os.Mkdir(out, 0o755)
		res, err := bundle.Write(context.Background(), bundle.WriteOptions{PayloadDir: payload, OutputDir: out, Manifest: m, Key: key, Split: split})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	f.signed = write("signed", priv, 0).Path
	f.unsigned = write("unsigned", nil, 0).Path
	f.split = write("split", priv, 16<<10).Path
	miss := write("missing-part", priv, 16<<10)
	f.missingPart = miss.Path
	f.missingPartName = miss.Parts[1].Name
	os.Remove(filepath.Join(filepath.Dir(miss.Path), f.missingPartName))

	tam := write("tampered", priv, 0)
	f.tampered = tam.Path
	f.tamperedFile = "providers/registry.terraform.io/coder/coder/terraform-provider-coder_2.1.0_linux_amd64.zip"
	data, _ := os.ReadFile(tam.Path)
	// Flip a byte inside the provider zip's member (stored raw, 120 KB):
	// find its header, then skip it.
	i := bytes.Index(data, []byte("payload/"+f.tamperedFile))
	if i < 0 {
		t.Fatal("no provider member")
	}
	data[i+512+1000] ^= 0xff
	os.WriteFile(tam.Path, data, 0o644)
	return f
}

func runMain(t *testing.T, _ []string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestBundleCommands runs coder bundle keygen|inspect|verify|extract through
// cli.Main: exit 0 when fine, 1 for a bad bundle (naming the file or part),
// 2 for usage mistakes.
func TestBundleCommands(t *testing.T) {
	t.Parallel()
	f := newBundleFixture(t)
	fresh := func() string { return filepath.Join(t.TempDir(), "release") }
	bad, badSplit, badKey := fresh(), fresh(), fresh()
	nonEmpty := t.TempDir()
	os.WriteFile(filepath.Join(nonEmpty, "x"), nil, 0o644)
	tests := []struct {
		name       string
		args       []string
		code       int
		wantOut    []string
		wantErr    []string
		absentDir  string // must not exist afterwards
		presentDir string // must hold the extracted payload afterwards
	}{
		{name: "Help", args: []string{"bundle", "--help"}, code: 0, wantOut: []string{"keygen", "inspect", "verify", "extract"}},
		{name: "UnknownSubcommand", args: []string{"bundle", "frobnicate"}, code: 2, wantErr: []string{"frobnicate"}},
		{name: "KeygenNoOutput", args: []string{"bundle", "keygen"}, code: 2, wantErr: []string{"--output"}},
		{name: "KeygenExisting", args: []string{"bundle", "keygen", "--output", filepath.Dir(f.pub)}, code: 1, wantErr: []string{"refusing to overwrite"}},
		{name: "KeygenStrayArg", args: []string{"bundle", "keygen", "--output", fresh(), "extra"}, code: 2, wantErr: []string{"extra"}},

		{name: "Inspect", args: []string{"bundle", "inspect", f.signed}, code: 0,
			wantOut: []string{"acme-coder 2026.11.1", "linux/amd64", "coder", "terraform", "1.11.4", "registry.terraform.io/coder/coder", "docker", "Signed:"}},
		{name: "InspectSplit", args: []string{"bundle", "inspect", f.split}, code: 0, wantOut: []string{"acme-coder", "parts"}},
		{name: "InspectSplitPlainName", args: []string{"bundle", "inspect", strings.TrimSuffix(f.split, ".part000")}, code: 0, wantOut: []string{"acme-coder"}},
		{name: "InspectNoFile", args: []string{"bundle", "inspect"}, code: 2, wantErr: []string{"FILE"}},
		{name: "InspectMissing", args: []string{"bundle", "inspect", filepath.Join(f.dir, "nope.bundle")}, code: 1, wantErr: []string{"nope.bundle"}},
		{name: "InspectBadOutput", args: []string{"bundle", "inspect", f.signed, "-o", "yaml"}, code: 2, wantErr: []string{"--output", "yaml"}},

		{name: "Verify", args: []string{"bundle", "verify", f.signed, "--public-key", f.pub}, code: 0, wantOut: []string{"OK", "signature OK"}},
		{name: "VerifySplit", args: []string{"bundle", "verify", f.split, "--public-key", f.pub}, code: 0, wantOut: []string{"OK", "parts"}},
		{name: "VerifyNoKey", args: []string{"bundle", "verify", f.signed}, code: 0, wantOut: []string{"NOT checked"},
			wantErr: []string{"signature not checked: pass --public-key"}},
		{name: "VerifyTampered", args: []string{"bundle", "verify", f.tampered, "--public-key", f.pub}, code: 1, wantErr: []string{f.tamperedFile}},
		{name: "VerifyTamperedNoKey", args: []string{"bundle", "verify", f.tampered}, code: 1, wantErr: []string{f.tamperedFile}},
		{name: "VerifyMissingPart", args: []string{"bundle", "verify", f.missingPart, "--public-key", f.pub}, code: 1, wantErr: []string{f.missingPartName, "missing"}},
		{name: "VerifyWrongKey", args: []string{"bundle", "verify", f.signed, "--public-key", f.otherPub}, code: 1, wantErr: []string{"not by the given public key"}},
		{name: "VerifyUnsignedWithKey", args: []string{"bundle", "verify", f.unsigned, "--public-key", f.pub}, code: 1, wantErr: []string{"not signed"}},
		{name: "VerifyUnsignedAllowed", args: []string{"bundle", "verify", f.unsigned, "--public-key", f.pub, "--allow-unsigned"}, code: 0,
			wantOut: []string{"OK", "unsigned"}, wantErr: []string{"unsigned"}},
		{name: "VerifyBadKeyFile", args: []string{"bundle", "verify", f.signed, "--public-key", filepath.Join(f.dir, "nope.pub")}, code: 2, wantErr: []string{"public key " + filepath.Join(f.dir, "nope.pub") + ": no such file"}},
		{name: "VerifyPrivateKeyAsPublic", args: []string{"bundle", "verify", f.signed, "--public-key", f.key}, code: 2, wantErr: []string{"public key " + f.key + ": holds a PRIVATE KEY, want a PUBLIC KEY: pass bundle.pub, not bundle.key"}},

		{name: "ExtractNoKey", args: []string{"bundle", "extract", f.signed, "--dir", fresh()}, code: 2, wantErr: []string{"--public-key", "--allow-unsigned"}},
		{name: "ExtractBoth", args: []string{"bundle", "extract", f.signed, "--dir", fresh(), "--public-key", f.pub, "--allow-unsigned"}, code: 2, wantErr: []string{"exclude"}},
		{name: "ExtractNoDir", args: []string{"bundle", "extract", f.signed, "--public-key", f.pub}, code: 2, wantErr: []string{"--dir"}},
		{name: "ExtractNonEmpty", args: []string{"bundle", "extract", f.signed, "--dir", nonEmpty, "--public-key", f.pub}, code: 2, wantErr: []string{"not empty"}},
		{name: "Extract", args: []string{"bundle", "extract", f.signed, "--dir", filepath.Join(f.dir, "ok"), "--public-key", f.pub}, code: 0,
			wantOut: []string{"Extracted acme-coder 2026.11.1"}, presentDir: filepath.Join(f.dir, "ok")},
		{name: "ExtractSplit", args: []string{"bundle", "extract", f.split, "--dir", filepath.Join(f.dir, "ok-split"), "--public-key", f.pub}, code: 0,
			presentDir: filepath.Join(f.dir, "ok-split")},
		{name: "ExtractUnsignedAllowed", args: []string{"bundle", "extract", f.unsigned, "--dir", filepath.Join(f.dir, "ok-unsigned"), "--allow-unsigned"}, code: 0,
			wantOut: []string{"signature not checked"}, presentDir: filepath.Join(f.dir, "ok-unsigned")},
		{name: "ExtractTampered", args: []string{"bundle", "extract", f.tampered, "--dir", bad, "--public-key", f.pub}, code: 1,
			wantErr: []string{f.tamperedFile}, absentDir: bad},
		{name: "ExtractMissingPart", args: []string{"bundle", "extract", f.missingPart, "--dir", badSplit, "--public-key", f.pub}, code: 1,
			wantErr: []string{f.missingPartName}, absentDir: badSplit},
		{name: "ExtractWrongKey", args: []string{"bundle", "extract", f.signed, "--dir", badKey, "--public-key", f.otherPub}, code: 1,
			wantErr: []string{"not by the given public key"}, absentDir: badKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runMain(t, nil, tt.args...)
			if code != tt.code {
				t.Fatalf("coder %s: exit code %d, want %d\nstdout: %s\nstderr: %s", strings.Join(tt.args, " "), code, tt.code, stdout, stderr)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout does not say %q:\n%s", want, stdout)
				}
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr)
				}
			}
			if tt.code != 0 {
				// The error is the last line, and the only "error:" line.
				lines := strings.Split(strings.TrimSpace(stderr), "\n")
				if !strings.HasPrefix(lines[len(lines)-1], "error: ") || strings.Count(stderr, "error: ") != 1 {
					t.Errorf("stderr: want one \"error: ...\" line, last:\n%s", stderr)
				}
			}
			if tt.absentDir != "" {
				if _, err := os.Stat(tt.absentDir); !os.IsNotExist(err) {
					t.Errorf("%s exists after a failed extract", tt.absentDir)
				}
				entries, _ := os.ReadDir(filepath.Dir(tt.absentDir))
				for _, e := range entries {
					if strings.Contains(e.Name(), ".unverified") {
						t.Errorf("staging folder %s left behind", e.Name())
					}
				}
			}
			if tt.presentDir != "" {
				if _, err := os.Stat(filepath.Join(tt.presentDir, "bin", "coder-linux-amd64")); err != nil {
					t.Errorf("extracted folder: %v", err)
				}
			}
		})
	}
}

// TestBundleInspectJSON: -o json is the manifest and the file's info.
func TestBundleInspectJSON(t *testing.T) {
	t.Parallel()
	f := newBundleFixture(t)
	code, stdout, stderr := runMain(t, nil, "bundle", "inspect", f.split, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out struct {
		Manifest bundle.Manifest `json:"manifest"`
		Info     bundle.Info     `json:"info"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("decode: %v\n%s", err, stdout)
	}
	if out.Manifest.Name != "acme-coder" || out.Manifest.Components.Terraform == nil || out.Manifest.Components.Terraform.Version != "1.11.4" ||
		!out.Info.Signed || len(out.Info.Parts) < 2 || out.Info.TotalSize == 0 {
		t.Errorf("inspect -o json: got %+v", out)
	}
}

// TestBundlePublicKeyEnv: CODER_BUNDLE_PUBLIC_KEY stands in for --public-key.
// Not parallel: cli.Main reads the process environment.
func TestBundlePublicKeyEnv(t *testing.T) {
	f := newBundleFixture(t)
	t.Setenv("CODER_BUNDLE_PUBLIC_KEY", f.otherPub)
	if code, _, stderr := runMain(t, nil, "bundle", "verify", f.signed); code != 1 || !strings.Contains(stderr, "not by the given public key") {
		t.Errorf("verify with the wrong key in CODER_BUNDLE_PUBLIC_KEY: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runMain(t, nil, "bundle", "verify", f.signed, "--public-key", f.pub); code != 0 {
		t.Errorf("--public-key over the environment: exit %d, %s", code, stderr)
	}
}
