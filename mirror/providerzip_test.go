package mirror

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"airgapcoder/internal/testfs"
)

// upstreamZip writes a zip the way a registry might publish one: several
// entries, timestamps of its own.
func upstreamZip(t *testing.T, entries map[string]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "upstream.zip")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		h := &zip.FileHeader{Name: name, Method: zip.Deflate}
		h.SetMode(0o755)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(entries[name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAddProviderZipKeepsBytes(t *testing.T) {
	src := upstreamZip(t, map[string]string{
		"terraform-provider-coder_v0.1.0": "the provider",
		"LICENSE":                         "MPL",
	})
	dir := t.TempDir()
	linux := Platform{"linux", "amd64"}
	if err := AddProviderZip(dir, testAddr, "0.1.0", linux, src); err != nil {
		t.Fatal(err)
	}
	// A second platform of the same version and a second version merge in.
	if err := AddProviderZip(dir, testAddr, "0.1.0", Platform{"linux", "arm64"}, src); err != nil {
		t.Fatal(err)
	}
	if err := AddProviderZip(dir, testAddr, "0.2.0", linux, src); err != nil {
		t.Fatal(err)
	}

	stored := filepath.Join(ProviderDir(dir, testAddr), ZipName(testAddr, "0.1.0", linux))
	if !bytes.Equal(readFile(t, stored), readFile(t, src)) {
		t.Fatal("stored zip differs from the upstream zip: want it kept byte for byte")
	}
	h1, zh, err := Hashes(src)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := ReadRelease(dir, testAddr, "0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rel.Archives["linux_amd64"], (Archive{URL: ZipName(testAddr, "0.1.0", linux), Hashes: []string{h1, zh}}); !reflect.DeepEqual(got, want) {
		t.Errorf("0.1.0.json linux_amd64: got %+v, want %+v", got, want)
	}
	if _, ok := rel.Archives["linux_arm64"]; !ok || len(rel.Archives) != 2 {
		t.Errorf("0.1.0.json archives: got %v, want linux_amd64 and linux_arm64", rel.Archives)
	}
	idx, err := ReadIndex(dir, testAddr)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]struct{}{"0.1.0": {}, "0.2.0": {}}; !reflect.DeepEqual(idx.Versions, want) {
		t.Errorf("index versions: got %v, want %v", idx.Versions, want)
	}
}

// TestAddProviderZipAgreesWithAddProvider: a zip that AddProvider packed and
// AddProviderZip stored again gives the same tree.
func TestAddProviderZipAgreesWithAddProvider(t *testing.T) {
	linux := Platform{"linux", "amd64"}
	packed := t.TempDir()
	if err := AddProvider(packed, testAddr, "1.0.0", linux, fakeBinary(t, "bytes")); err != nil {
		t.Fatal(err)
	}
	copied := t.TempDir()
	zipPath := filepath.Join(ProviderDir(packed, testAddr), ZipName(testAddr, "1.0.0", linux))
	if err := AddProviderZip(copied, testAddr, "1.0.0", linux, zipPath); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"index.json", "1.0.0.json", ZipName(testAddr, "1.0.0", linux)} {
		a := readFile(t, filepath.Join(ProviderDir(packed, testAddr), name))
		b := readFile(t, filepath.Join(ProviderDir(copied, testAddr), name))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between AddProvider and AddProviderZip", name)
		}
	}
}

func TestAddProviderZipErrors(t *testing.T) {
	linux := Platform{"linux", "amd64"}
	good := upstreamZip(t, map[string]string{"terraform-provider-coder_v0.1.0": "x"})
	notZip := filepath.Join(t.TempDir(), "not.zip")
	if err := os.WriteFile(notZip, []byte("this is not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		version string
		p       Platform
		zip     string
	}{
		{"not a zip", "0.1.0", linux, notZip},
		{"missing zip", "0.1.0", linux, filepath.Join(t.TempDir(), "nope.zip")},
		{"no executable", "0.1.0", linux, upstreamZip(t, map[string]string{"README.md": "x"})},
		{"other provider", "0.1.0", linux, upstreamZip(t, map[string]string{"terraform-provider-null_v1.0.0": "x"})},
		{"parent entry", "0.1.0", linux, upstreamZip(t, map[string]string{"../terraform-provider-coder": "x"})},
		{"absolute entry", "0.1.0", linux, upstreamZip(t, map[string]string{"/terraform-provider-coder": "x"})},
		{"bad version", "v0.1.0", linux, good},
		{"bad platform", "0.1.0", Platform{"Linux", "amd64"}, good},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := AddProviderZip(dir, testAddr, tt.version, tt.p, tt.zip); err == nil {
				t.Fatal("got no error, want one")
			}
			if names := testfs.Names(t, ProviderDir(dir, testAddr)); len(names) != 0 {
				t.Errorf("files left behind: %v", names)
			}
		})
	}
}
