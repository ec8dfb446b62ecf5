package bundle_test

import (
	"strings"
	"testing"

	"airgapcoder/bundle"
)

func TestValidPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path    string
		wantErr string // "" = valid
	}{
		{"bin/coder-linux-amd64", ""},
		{"providers/registry.terraform.io/coder/coder/terraform-provider-coder_2.1.0_linux_amd64.zip", ""},
		{"templates/docker/.terraform.lock.hcl", ""},
		{"images/blobs/sha256/abc", ""},
		{"", "empty"},
		{"bin", "payload folder"},
		{"README", "payload folder"},
		{"other/x", "payload folder"},
		{"../bin/x", `".."`},
		{"bin/../x", `".."`},
		{"bin/..", `".."`},
		{"/bin/x", "absolute"},
		{`bin\x`, "backslash"},
		{"bin//x", "not clean"},
		{"bin/./x", "not clean"},
		{"bin/x/", "not clean"},
		{"./bin/x", "not clean"},
		{"bin/x\n", "control"},
		{"bin/\xff", "UTF-8"},
	}
	for _, tt := range tests {
		err := bundle.ValidPath(tt.path)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("ValidPath(%q): %v, want nil", tt.path, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ValidPath(%q): %v, want an error saying %q", tt.path, err, tt.wantErr)
		}
	}
}

// TestManifestValidate covers what the path rules alone do not: order,
// duplicates, a file that is also a folder, member name collisions.
func TestManifestValidate(t *testing.T) {
	t.Parallel()
	stored := func(f bundle.File, size int64, sum string) bundle.File {
		f.StoredSize, f.StoredSHA256 = size, sum
		return f
	}
	f := func(p, stored string) bundle.File {
		return bundle.File{Path: p, Size: 1, SHA256: strings.Repeat("a", 64), Mode: 0o644, Stored: stored}
	}
	tests := []struct {
		name    string
		files   []bundle.File
		wantErr string
	}{
		{"OK", []bundle.File{f("bin/a", "raw"), f("bin/b", "zstd")}, ""},
		{"Unsorted", []bundle.File{f("bin/b", "raw"), f("bin/a", "raw")}, "not sorted"},
		{"Duplicate", []bundle.File{f("bin/a", "raw"), f("bin/a", "raw")}, "twice"},
		{"FileIsFolder", []bundle.File{f("bin/a", "raw"), f("bin/a/b", "raw")}, "also a folder"},
		{"MemberCollision", []bundle.File{f("bin/a", "zstd"), f("bin/a.zst", "raw")}, "both be stored"},
		{"BadMode", []bundle.File{{Path: "bin/a", SHA256: strings.Repeat("a", 64), Mode: 0o777, Stored: "raw"}}, "mode"},
		{"BadStored", []bundle.File{f("bin/a", "gzip")}, "stored"},
		{"BadHash", []bundle.File{{Path: "bin/a", SHA256: "ABC", Mode: 0o644, Stored: "raw"}}, "sha256"},
		{"StoredDigest", []bundle.File{stored(f("bin/a", "zstd"), 5, strings.Repeat("b", 64))}, ""},
		{"StoredDigestOnRaw", []bundle.File{stored(f("bin/a", "raw"), 5, strings.Repeat("b", 64))}, "only for"},
		{"StoredDigestBadHash", []bundle.File{stored(f("bin/a", "zstd"), 5, "xyz")}, "stored_sha256"},
		{"StoredDigestNoSize", []bundle.File{stored(f("bin/a", "zstd"), 0, strings.Repeat("b", 64))}, "stored_size"},
	}
	for _, tt := range tests {
		m := bundle.Manifest{Schema: 1, Name: "n", Release: "r", Files: tt.files}
		err := m.Validate()
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: Validate: %v, want %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"1048576", 1 << 20, false},
		{"4GiB-1", 4<<30 - 1, false},
		{"4 GiB - 1", 4<<30 - 1, false},
		{"700MB", 700_000_000, false},
		{"1GiB", 1 << 30, false},
		{"100MiB", 100 << 20, false},
		{"100mib", 100 << 20, false},
		{"2KiB+1", 2049, false},
		{"1TB", 1e12, false},
		{"512B", 512, false},
		{"", 0, true},
		{"0", 0, true},
		{"1KiB-1024", 0, true},
		{"GiB", 0, true},
		{"1.5GiB", 0, true},
		{"10XB", 0, true},
		{"-5", 0, true},
		{"99999999999TiB", 0, true},
	}
	for _, tt := range tests {
		got, err := bundle.ParseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
