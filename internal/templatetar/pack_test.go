package templatetar

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// template is a folder with everything Pack must keep or skip.
var template = map[string]string{
	"main.tf":                                   "terraform {}\n",
	"variables.tf":                              "variable \"x\" {}\n",
	".terraform.lock.hcl":                       "# lock\n",
	"scripts/start.sh*":                         "#!/bin/sh\necho hi\n",
	"modules/net/main.tf":                       "resource \"null\" \"n\" {}\n",
	"modules/net/.terraform/modules.json":       "{}",
	"empty/":                                    "",
	"alias.tf":                                  "->main.tf",
	"linked-modules":                            "->modules",
	".terraform/providers/registry/bin":         "binary",
	"terraform.tfstate":                         "{}",
	"terraform.tfstate.backup":                  "{}",
	"terraform.tfstate.d/dev/terraform.tfstate": "{}",
	"errored.tfstate":                           "{}",
	"ünïcode.tf":                                "# ü\n",
	longPacked:                                  "long\n",
}

// longPacked is too long a name for a plain ustar header.
var longPacked = "docs/" + strings.Repeat("long-", 25) + "name.md"

// packed is what template looks like after a round trip.
var packed = map[string]string{
	".terraform.lock.hcl":        "0644 # lock\n",
	"alias.tf":                   "0644 terraform {}\n",
	"empty/":                     "",
	"linked-modules/":            "",
	"linked-modules/net/":        "",
	"linked-modules/net/main.tf": "0644 resource \"null\" \"n\" {}\n",
	"main.tf":                    "0644 terraform {}\n",
	"modules/":                   "",
	"modules/net/":               "",
	"modules/net/main.tf":        "0644 resource \"null\" \"n\" {}\n",
	"scripts/":                   "",
	"scripts/start.sh":           "0755 #!/bin/sh\necho hi\n",
	"variables.tf":               "0644 variable \"x\" {}\n",
	"ünïcode.tf":                 "0644 # ü\n",
	"docs/":                      "",
	longPacked:                   "0644 long\n",
}

func TestRoundTrip(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, template)

	var buf bytes.Buffer
	if err := Pack(src, &buf, 0); err != nil {
		t.Fatalf("Pack: %v", err)
	}

	sum, err := Validate(bytes.NewReader(buf.Bytes()), 0)
	if err != nil {
		t.Fatalf("Validate: %v", err)
	}
	wantPaths := []string{
		".terraform.lock.hcl", "alias.tf", "docs/", longPacked, "empty/",
		"linked-modules/", "linked-modules/net/", "linked-modules/net/main.tf",
		"main.tf", "modules/", "modules/net/", "modules/net/main.tf",
		"scripts/", "scripts/start.sh", "variables.tf", "ünïcode.tf",
	}
	if !slices.Equal(sum.Paths, wantPaths) {
		t.Errorf("Validate paths = %q, want %q", sum.Paths, wantPaths)
	}
	var wantBytes int64
	wantFiles := 0
	for name, v := range packed {
		if !strings.HasSuffix(name, "/") {
			wantFiles++
			wantBytes += int64(len(v) - len("0644 "))
		}
	}
	if sum.Files != wantFiles || sum.Bytes != wantBytes {
		t.Errorf("Validate = %d files, %d bytes, want %d files, %d bytes", sum.Files, sum.Bytes, wantFiles, wantBytes)
	}

	dst, _ := emptyDir(t)
	if err := Extract(bytes.NewReader(buf.Bytes()), dst, 0); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if got := readTree(t, dst); !maps.Equal(got, packed) {
		t.Errorf("extracted tree:\n got %v\nwant %v", got, packed)
	}
}

func TestPackDeterministic(t *testing.T) {
	pack := func(dir string) []byte {
		t.Helper()
		var buf bytes.Buffer
		if err := Pack(dir, &buf, 0); err != nil {
			t.Fatalf("Pack: %v", err)
		}
		return buf.Bytes()
	}
	src := t.TempDir()
	writeTree(t, src, template)
	first := pack(src)

	if second := pack(src); !bytes.Equal(first, second) {
		t.Error("second Pack differs from the first")
	}

	touched := time.Date(2031, 2, 3, 4, 5, 6, 7, time.UTC)
	err := filepath.Walk(src, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, touched, touched)
	})
	if err != nil {
		t.Fatal(err)
	}
	if third := pack(src); !bytes.Equal(first, third) {
		t.Error("Pack after touching mtimes differs from the first")
	}

	// The same contents created in another order, elsewhere.
	other := filepath.Join(t.TempDir(), "elsewhere")
	for _, name := range slices.Backward(slices.Sorted(maps.Keys(template))) {
		writeTree(t, other, map[string]string{name: template[name]})
	}
	if fourth := pack(other); !bytes.Equal(first, fourth) {
		t.Error("Pack of a copy made in another order differs from the first")
	}

	tr := tar.NewReader(bytes.NewReader(first))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !hdr.ModTime.Equal(time.Unix(0, 0)) || hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || hdr.Gname != "" {
			t.Errorf("%s: mtime %v, uid %d, gid %d, uname %q, gname %q; want epoch, 0, 0, empty, empty",
				hdr.Name, hdr.ModTime, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname)
		}
	}
}

// packBesideSecret packs files, written into a folder beside
// ../outside/secret.txt, a file no link may bring into the tar.
func packBesideSecret(t *testing.T, files map[string]string) (*bytes.Buffer, error) {
	t.Helper()
	base := t.TempDir()
	writeTree(t, base, map[string]string{"outside/secret.txt": "secret"})
	src := filepath.Join(base, "src")
	writeTree(t, src, files)
	var buf bytes.Buffer
	err := Pack(src, &buf, 0)
	return &buf, err
}

func TestPackFollowsSymlinksInside(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string // the tar's paths
	}{
		{"file", map[string]string{"main.tf": "m", "alias.tf": "->main.tf"}, []string{"alias.tf", "main.tf"}},
		{"folder", map[string]string{"mod/a.tf": "a", "link": "->mod"}, []string{"link/", "link/a.tf", "mod/", "mod/a.tf"}},
		{"chain", map[string]string{"main.tf": "m", "a": "->b", "b": "->main.tf"}, []string{"a", "b", "main.tf"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf, err := packBesideSecret(t, tc.files)
			if err != nil {
				t.Fatalf("Pack: %v", err)
			}
			sum, err := Validate(buf, 0)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !slices.Equal(sum.Paths, tc.want) {
				t.Errorf("packed %q, want %q", sum.Paths, tc.want)
			}
		})
	}
}

func TestPackRefusesSymlinks(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		want    error  // the sentinel, or nil where there is none
		wantMsg string // in the error
	}{
		{"relative outside", map[string]string{"main.tf": "m", "secret": "->../outside/secret.txt"}, ErrUnsafePath, `"secret" -> "../outside/secret.txt" leaves`},
		{"absolute outside", map[string]string{"main.tf": "m", "passwd": "->/etc/passwd"}, ErrUnsafePath, `"passwd" -> "/etc/passwd" leaves`},
		{"inside then outside", map[string]string{"main.tf": "m", "a": "->b", "b": "->../outside/secret.txt"}, ErrUnsafePath, `"a" -> "b" leaves`},
		{"to the folder above", map[string]string{"main.tf": "m", "up": "->.."}, ErrUnsafePath, `"up" -> ".." leaves`},
		{"loop", map[string]string{"main.tf": "m", "sub/up": "->.."}, nil, `"sub/up": symbolic link loop`},
		{"dangling", map[string]string{"main.tf": "m", "gone.tf": "->missing.tf"}, nil, `"gone.tf" -> "missing.tf"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf, err := packBesideSecret(t, tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Pack error = %v, want one containing %s", err, tc.wantMsg)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Pack error = %v, want %v", err, tc.want)
			}
			if strings.Contains(buf.String(), "secret") {
				t.Error("Pack wrote the outside file's contents")
			}
		})
	}
}

func TestPackRejects(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		max   int64
		want  error
	}{
		{name: "over the limit", files: map[string]string{"big.tf": strings.Repeat("b", 4096)}, max: 2048, want: ErrTooLarge},
		{name: "nothing but state", files: map[string]string{".terraform/x": "x", "terraform.tfstate": "{}", "empty/": ""}, want: ErrEmpty},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			writeTree(t, src, tc.files)
			if err := Pack(src, io.Discard, tc.max); !errors.Is(err, tc.want) {
				t.Errorf("Pack error = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestPackLimitBoundary checks that Pack and Validate agree on the limit:
// a folder whose tar is exactly maxSize bytes packs and validates, one byte
// less fails both.
func TestPackLimitBoundary(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, map[string]string{"main.tf": strings.Repeat("m", 1000), "mod/a.tf": "a"})
	var buf bytes.Buffer
	if err := Pack(src, &buf, 0); err != nil {
		t.Fatalf("Pack: %v", err)
	}
	size := int64(buf.Len())
	if err := Pack(src, io.Discard, size); err != nil {
		t.Errorf("Pack with limit %d = %v, want nil", size, err)
	}
	if err := Pack(src, io.Discard, size-1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Pack with limit %d = %v, want %v", size-1, err, ErrTooLarge)
	}
	if _, err := Validate(bytes.NewReader(buf.Bytes()), size); err != nil {
		t.Errorf("Validate with limit %d = %v, want nil", size, err)
	}
}
