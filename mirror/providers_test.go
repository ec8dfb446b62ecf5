package mirror

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"

	"airgapcoder/internal/testfs"
	"airgapcoder/internal/testtier"
)

var testAddr = ProviderAddress{Hostname: "registry.terraform.io", Namespace: "coder", Type: "coder"}

func TestParseProviderAddress(t *testing.T) {
	tests := []struct {
		in      string
		want    ProviderAddress
		wantErr bool
	}{
		{in: "registry.terraform.io/coder/coder", want: testAddr},
		{in: "coder/coder", want: testAddr},
		{in: "Registry.Terraform.io/Coder/Coder", want: testAddr},
		{in: "hashicorp/null", want: ProviderAddress{"registry.terraform.io", "hashicorp", "null"}},
		{in: "localhost:8443/a/b", want: ProviderAddress{"localhost:8443", "a", "b"}},
		{in: "coder", wantErr: true},
		{in: "a/b/c/d", wantErr: true},
		{in: "host/-ns/type", wantErr: true},
		{in: "host/ns/type_x", wantErr: true},
		{in: "host/ns/terraform-provider-x", wantErr: true},
		{in: "../ns/type", wantErr: true},
		{in: "host/../type", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseProviderAddress(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseProviderAddress(%q) = %+v, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseProviderAddress(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParsePlatform(t *testing.T) {
	if p, err := ParsePlatform("linux_arm64"); err != nil || p != (Platform{"linux", "arm64"}) {
		t.Errorf("ParsePlatform(linux_arm64) = %+v, %v", p, err)
	}
	for _, bad := range []string{"linux", "linux_", "_amd64", "Linux_amd64", "linux/amd64"} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("ParsePlatform(%q): got no error, want one", bad)
		}
	}
}

// fakeBinary writes an executable-looking file and returns its path.
func fakeBinary(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "terraform-provider-coder")
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAddProviderRoundTrip(t *testing.T) {
	dir := t.TempDir()
	content := "#!/bin/sh\necho provider\n"
	bin := fakeBinary(t, content)
	linux := Platform{"linux", "amd64"}
	if err := AddProvider(dir, testAddr, "0.1.0", linux, bin); err != nil {
		t.Fatal(err)
	}

	pdir := filepath.Join(dir, "registry.terraform.io", "coder", "coder")
	names := testfs.Names(t, pdir)
	wantNames := []string{"0.1.0.json", "index.json", "terraform-provider-coder_0.1.0_linux_amd64.zip"}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("files in %s: got %v, want %v (no temporary files left)", pdir, names, wantNames)
	}

	idx, err := ReadIndex(dir, testAddr)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]struct{}{"0.1.0": {}}; !reflect.DeepEqual(idx.Versions, want) {
		t.Errorf("index versions: got %v, want %v", idx.Versions, want)
	}
	raw, err := os.ReadFile(filepath.Join(pdir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(string(raw)), ""); got != `{"versions":{"0.1.0":{}}}` {
		t.Errorf("index.json: got %s, want {\"versions\":{\"0.1.0\":{}}}", got)
	}

	rel, err := ReadRelease(dir, testAddr, "0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	arch, ok := rel.Archives["linux_amd64"]
	if !ok || len(rel.Archives) != 1 {
		t.Fatalf("archives: got %v, want only linux_amd64", rel.Archives)
	}
	zipPath := filepath.Join(pdir, arch.URL)
	h1, zh, err := Hashes(zipPath)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{h1, zh}; !slices.Equal(arch.Hashes, want) {
		t.Errorf("hashes: got %v, want %v", arch.Hashes, want)
	}
	if !strings.HasPrefix(h1, "h1:") || !regexp.MustCompile(`^zh:[0-9a-f]{64}$`).MatchString(zh) {
		t.Errorf("hash syntax: got %q, %q", h1, zh)
	}

	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	if len(zr.File) != 1 {
		t.Fatalf("zip entries: got %d, want 1", len(zr.File))
	}
	f := zr.File[0]
	if f.Name != "terraform-provider-coder_v0.1.0" {
		t.Errorf("zip entry name: got %q, want terraform-provider-coder_v0.1.0", f.Name)
	}
	if f.Mode().Perm() != 0o755 {
		t.Errorf("zip entry mode: got %v, want 0755", f.Mode())
	}
	rc, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != content {
		t.Errorf("zip entry content: got %q, want %q", got, content)
	}

	// windows executables get .exe inside the zip.
	if err := AddProvider(dir, testAddr, "0.1.0", Platform{"windows", "amd64"}, bin); err != nil {
		t.Fatal(err)
	}
	wz, err := zip.OpenReader(filepath.Join(pdir, "terraform-provider-coder_0.1.0_windows_amd64.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer wz.Close()
	if name := wz.File[0].Name; name != "terraform-provider-coder_v0.1.0.exe" {
		t.Errorf("windows zip entry: got %q, want terraform-provider-coder_v0.1.0.exe", name)
	}
}

func TestAddProviderReproducible(t *testing.T) {
	bin := fakeBinary(t, strings.Repeat("provider bytes ", 1000))
	p := Platform{"linux", "amd64"}
	dirA, dirB := t.TempDir(), t.TempDir()
	if err := AddProvider(dirA, testAddr, "1.2.3", p, bin); err != nil {
		t.Fatal(err)
	}
	// A different modification time of the input must not change the zip.
	later := time.Now().Add(48 * time.Hour)
	if err := os.Chtimes(bin, later, later); err != nil {
		t.Fatal(err)
	}
	if err := AddProvider(dirB, testAddr, "1.2.3", p, bin); err != nil {
		t.Fatal(err)
	}
	name := ZipName(testAddr, "1.2.3", p)
	a := readFile(t, filepath.Join(ProviderDir(dirA, testAddr), name))
	b := readFile(t, filepath.Join(ProviderDir(dirB, testAddr), name))
	if !bytes.Equal(a, b) {
		t.Fatalf("zips differ between two runs (%d and %d bytes)", len(a), len(b))
	}
	for _, f := range []string{"index.json", "1.2.3.json"} {
		if !bytes.Equal(readFile(t, filepath.Join(ProviderDir(dirA, testAddr), f)), readFile(t, filepath.Join(ProviderDir(dirB, testAddr), f))) {
			t.Errorf("%s differs between two runs", f)
		}
	}
}

func TestAddProviderMerge(t *testing.T) {
	dir := t.TempDir()
	binA := fakeBinary(t, "binary A")
	binB := fakeBinary(t, "binary B")
	steps := []struct {
		version string
		p       Platform
		bin     string
	}{
		{"0.1.0", Platform{"linux", "amd64"}, binA},
		{"0.1.0", Platform{"linux", "arm64"}, binA},
		{"0.2.0", Platform{"linux", "amd64"}, binA},
		{"0.1.0", Platform{"linux", "amd64"}, binB}, // replaces the first archive
	}
	for _, s := range steps {
		if err := AddProvider(dir, testAddr, s.version, s.p, s.bin); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := ReadIndex(dir, testAddr)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]struct{}{"0.1.0": {}, "0.2.0": {}}; !reflect.DeepEqual(idx.Versions, want) {
		t.Errorf("index versions: got %v, want %v", idx.Versions, want)
	}
	want := map[string][]string{
		"0.1.0": {"linux_amd64", "linux_arm64"},
		"0.2.0": {"linux_amd64"},
	}
	for version, platforms := range want {
		rel, err := ReadRelease(dir, testAddr, version)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for k, a := range rel.Archives {
			got = append(got, k)
			h1, zh, err := Hashes(filepath.Join(ProviderDir(dir, testAddr), a.URL))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a.Hashes, []string{h1, zh}) {
				t.Errorf("%s %s: recorded hashes %v, zip has %s %s", version, k, a.Hashes, h1, zh)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, platforms) {
			t.Errorf("%s.json platforms: got %v, want %v", version, got, platforms)
		}
	}
	relA, _ := ReadRelease(dir, testAddr, "0.1.0")
	relB, _ := ReadRelease(dir, testAddr, "0.2.0")
	if slices.Equal(relA.Archives["linux_amd64"].Hashes, relB.Archives["linux_amd64"].Hashes) {
		t.Errorf("0.1.0 linux_amd64 was not replaced by binary B: hashes equal 0.2.0's (binary A)")
	}
}

func TestAddProviderErrors(t *testing.T) {
	bin := fakeBinary(t, "x")
	linux := Platform{"linux", "amd64"}
	tests := []struct {
		name    string
		addr    ProviderAddress
		version string
		p       Platform
		binary  string
	}{
		{"v prefix", testAddr, "v0.1.0", linux, bin},
		{"short version", testAddr, "0.1", linux, bin},
		{"build metadata", testAddr, "0.1.0+abc", linux, bin},
		{"bad platform", testAddr, "0.1.0", Platform{"linux", ""}, bin},
		{"bad address", ProviderAddress{"registry.terraform.io", "co/der", "coder"}, "0.1.0", linux, bin},
		{"missing binary", testAddr, "0.1.0", linux, filepath.Join(t.TempDir(), "nope")},
		{"binary is a folder", testAddr, "0.1.0", linux, t.TempDir()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := AddProvider(dir, tt.addr, tt.version, tt.p, tt.binary); err == nil {
				t.Fatal("got no error, want one")
			}
			if _, err := os.Stat(filepath.Join(ProviderDir(dir, testAddr), "index.json")); err == nil {
				t.Error("index.json written despite the error")
			}
			if names := testfs.Names(t, ProviderDir(dir, testAddr)); len(names) != 0 {
				t.Errorf("files left behind: %v", names)
			}
		})
	}
	// A prerelease is a valid provider version.
	if err := AddProvider(t.TempDir(), testAddr, "0.2.0-rc.1", linux, bin); err != nil {
		t.Errorf("prerelease version: %v", err)
	}
}

// TestHashesMatchTerraform checks the h1: hash against the one the real
// terraform computes and writes into .terraform.lock.hcl from the packed
// tree, offline.
func TestHashesMatchTerraform(t *testing.T) {
	tfBin := terraformBinary(t)
	dir := t.TempDir()
	if err := AddProvider(dir, testAddr, "0.1.0", Platform{"linux", "amd64"}, fakeBinary(t, "not really a provider")); err != nil {
		t.Fatal(err)
	}
	h1, _, err := Hashes(filepath.Join(ProviderDir(dir, testAddr), ZipName(testAddr, "0.1.0", Platform{"linux", "amd64"})))
	if err != nil {
		t.Fatal(err)
	}

	work := t.TempDir()
	tf := `terraform {
  required_providers {
    coder = {
      source  = "coder/coder"
      version = "0.1.0"
    }
  }
}
`
	if err := os.WriteFile(filepath.Join(work, "main.tf"), []byte(tf), 0o644); err != nil {
		t.Fatal(err)
	}
	cliConfig := filepath.Join(t.TempDir(), "terraform.rc")
	if err := os.WriteFile(cliConfig, []byte("# empty: no network, no mirrors but -fs-mirror\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tfx, err := tfexec.NewTerraform(work, tfBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := tfx.SetEnv(map[string]string{
		"PATH":               os.Getenv("PATH"),
		"HOME":               t.TempDir(),
		"CHECKPOINT_DISABLE": "1",
		"TF_CLI_CONFIG_FILE": cliConfig,
	}); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	tfx.SetStderr(&stderr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tfx.ProvidersLock(ctx, tfexec.FSMirror(dir), tfexec.Platform("linux_amd64")); err != nil {
		t.Fatalf("terraform providers lock: %v\n%s", err, stderr.String())
	}
	lock := string(readFile(t, filepath.Join(work, ".terraform.lock.hcl")))
	if !strings.Contains(lock, `provider "registry.terraform.io/coder/coder"`) {
		t.Fatalf("lock file has no block for the provider:\n%s", lock)
	}
	got := regexp.MustCompile(`"(h1:[^"]+)"`).FindAllStringSubmatch(lock, -1)
	if len(got) != 1 || got[0][1] != h1 {
		t.Fatalf("lock file h1 hashes: got %v, want exactly [%s]\n%s", got, h1, lock)
	}
}

func terraformBinary(t *testing.T) string {
	t.Helper()
	testtier.Heavy(t, "runs terraform")
	if p := os.Getenv("TERRAFORM"); p != "" {
		return p
	}
	p, err := exec.LookPath("terraform")
	if err != nil {
		if _, err := os.Stat("/usr/local/bin/terraform"); err == nil {
			return "/usr/local/bin/terraform"
		}
		t.Fatal("terraform not found (set TERRAFORM or put it on PATH; make test checks it is installed)")
	}
	return p
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
