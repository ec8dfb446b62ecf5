package mirror

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseImageRef(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		in, repo, tag, digest, str string
	}{
		{"docker.io/library/alpine:3.20", "docker.io/library/alpine", "3.20", "", "docker.io/library/alpine:3.20"},
		{"alpine", "docker.io/library/alpine", "latest", "", "docker.io/library/alpine:latest"},
		{"coder/envbuilder:1.0.0", "docker.io/coder/envbuilder", "1.0.0", "", "docker.io/coder/envbuilder:1.0.0"},
		{"index.docker.io/library/busybox:1", "docker.io/library/busybox", "1", "", "docker.io/library/busybox:1"},
		{"ghcr.io/coder/envbuilder:1.0.0@" + digest, "ghcr.io/coder/envbuilder", "1.0.0", digest, "ghcr.io/coder/envbuilder:1.0.0@" + digest},
		{"ghcr.io/coder/envbuilder@" + digest, "ghcr.io/coder/envbuilder", "", digest, "ghcr.io/coder/envbuilder@" + digest},
		{"registry.internal:5000/team/app:3", "registry.internal_5000/team/app", "3", "", "registry.internal:5000/team/app:3"},
		{"localhost/app", "localhost/app", "latest", "", "localhost/app:latest"},
		{"Harbor.Corp/a/b/c:x", "harbor.corp/a/b/c", "x", "", "harbor.corp/a/b/c:x"},
	}
	for _, tt := range tests {
		r, err := ParseImageRef(tt.in)
		if err != nil {
			t.Errorf("ParseImageRef(%q): %v", tt.in, err)
			continue
		}
		if r.Repository() != tt.repo || r.Tag != tt.tag || r.Digest != tt.digest || r.String() != tt.str {
			t.Errorf("ParseImageRef(%q): got repo %s tag %q digest %q string %s; want %s %q %q %s", tt.in, r.Repository(), r.Tag, r.Digest, r.String(), tt.repo, tt.tag, tt.digest, tt.str)
		}
	}
	for _, bad := range []string{"", "UPPER/case", "a//b", "x@sha256:short", "host/p:bad tag", "[::1]:5000/x"} {
		if r, err := ParseImageRef(bad); err == nil {
			t.Errorf("ParseImageRef(%q): got %+v, want an error", bad, r)
		}
	}
}

// TestReadLayoutImagesSkips checks entries without a full reference are
// reported, not served.
func TestReadLayoutImagesSkips(t *testing.T) {
	dir := t.TempDir()
	images := writeTestLayout(t, dir, 512)
	var idx struct {
		SchemaVersion int              `json:"schemaVersion"`
		MediaType     string           `json:"mediaType,omitempty"`
		Manifests     []map[string]any `json:"manifests"`
	}
	p := filepath.Join(dir, "index.json")
	if err := json.Unmarshal(readFile(t, p), &idx); err != nil {
		t.Fatal(err)
	}
	idx.Manifests[1]["annotations"] = map[string]string{RefNameAnnotation: "v2"} // OCI-style tag only
	idx.Manifests[2]["annotations"] = map[string]string{RefNameAnnotation: "v2", "io.containerd.image.name": "quay.io/x/y:z"}
	b, _ := json.Marshal(idx)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, skipped, err := ReadLayoutImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Ref.String() != images[0].ref || got[1].Ref.String() != "quay.io/x/y:z" {
		t.Errorf("images: got %+v", got)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "not a full reference") {
		t.Errorf("skipped: got %q", skipped)
	}
}
