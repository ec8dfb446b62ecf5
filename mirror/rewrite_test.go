package mirror

import (
	"os"
	"strings"
	"testing"
	"time"

	"airgapcoder/internal/testfs"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func readString(t *testing.T, p string) string {
	t.Helper()
	return string(readFile(t, p))
}

func TestRewriteImageRefsTable(t *testing.T) {
	tests := []struct {
		name     string
		refs     []string
		literal  string
		registry string
		want     string // "" means untouched
	}{
		{"hub short", []string{"alpine:3.20"}, "alpine:3.20", "127.0.0.1:8443", "127.0.0.1:8443/docker.io/library/alpine:3.20"},
		{"hub full ref, short literal", []string{"docker.io/library/alpine:3.20"}, "alpine:3.20", "127.0.0.1:8443", "127.0.0.1:8443/docker.io/library/alpine:3.20"},
		{"hub short ref, full literal", []string{"alpine:3.20"}, "docker.io/library/alpine:3.20", "127.0.0.1:8443", "127.0.0.1:8443/docker.io/library/alpine:3.20"},
		{"hub alias", []string{"alpine:3.20"}, "index.docker.io/library/alpine:3.20", "127.0.0.1:8443", "127.0.0.1:8443/docker.io/library/alpine:3.20"},
		{"hub user repo", []string{"codercom/enterprise-base:ubuntu"}, "codercom/enterprise-base:ubuntu", "reg.corp/prefix", "reg.corp/prefix/docker.io/codercom/enterprise-base:ubuntu"},
		{"bare name exact", []string{"alpine"}, "alpine", "127.0.0.1:8443", "127.0.0.1:8443/docker.io/library/alpine:latest"},
		{"bare literal not normalised", []string{"alpine:latest"}, "alpine", "127.0.0.1:8443", ""},
		{"ghcr", []string{"ghcr.io/coder/envbuilder:1.0.0"}, "ghcr.io/coder/envbuilder:1.0.0", "reg.corp/prefix/", "reg.corp/prefix/ghcr.io/coder/envbuilder:1.0.0"},
		{"host:port registry", []string{"localhost:5000/team/app:v1"}, "localhost:5000/team/app:v1", "mirror.internal:8443", "mirror.internal:8443/localhost_5000/team/app:v1"},
		{"https scheme stripped", []string{"alpine:3.20"}, "alpine:3.20", "https://127.0.0.1:8443", "127.0.0.1:8443/docker.io/library/alpine:3.20"},
		{"digest only", []string{"ghcr.io/coder/envbuilder@" + testDigest}, "ghcr.io/coder/envbuilder@" + testDigest, "127.0.0.1:8443", "127.0.0.1:8443/ghcr.io/coder/envbuilder@" + testDigest},
		{"tag and digest", []string{"alpine:3.20@" + testDigest}, "alpine:3.20@" + testDigest, "127.0.0.1:8443", "127.0.0.1:8443/docker.io/library/alpine:3.20@" + testDigest},
		{"pinned by digest, bundled by tag", []string{"images.test/coder/workspace:1"}, "images.test/coder/workspace@" + testDigest, "127.0.0.1:8443", "127.0.0.1:8443/images.test/coder/workspace@" + testDigest},
		{"hub short pinned by digest", []string{"alpine:3.20"}, "alpine@" + testDigest, "127.0.0.1:8443", "127.0.0.1:8443/docker.io/library/alpine@" + testDigest},
		{"digest of another repository untouched", []string{"alpine:3.20"}, "ubuntu@" + testDigest, "127.0.0.1:8443", ""},
		{"other tag untouched", []string{"alpine:3.20"}, "alpine:3.19", "127.0.0.1:8443", ""},
		{"other image untouched", []string{"alpine:3.20"}, "ubuntu:24.04", "127.0.0.1:8443", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := testfs.WriteFile(t, dir, "main.tf", "resource \"docker_container\" \"w\" {\n  image = \""+tt.literal+"\"\n}\n")
			got, err := RewriteImageRefs(dir, tt.refs, tt.registry)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			wantN := 1
			if want == "" {
				want, wantN = tt.literal, 0
			}
			if got["main.tf"] != wantN {
				t.Errorf("count = %v, want main.tf: %d", got, wantN)
			}
			if s := readString(t, p); s != "resource \"docker_container\" \"w\" {\n  image = \""+want+"\"\n}\n" {
				t.Errorf("file =\n%s\nwant image %q", s, want)
			}
		})
	}
}

func TestRewriteImageRefsWholeLiteralsOnly(t *testing.T) {
	dir := t.TempDir()
	src := `# image = "alpine:3.20" in a comment stays
// "alpine:3.20"
/* "alpine:3.20" */
variable "image" {
  default     = "alpine:3.20"
  description = "Workspace image, e.g. alpine:3.20 from the mirror"
}
locals {
  prefixed = "my-alpine:3.20"
  suffixed = "alpine:3.20-rc"
  interp   = "${var.x}alpine:3.20"
  escaped  = "x\"alpine:3.20"
  nested   = "${coalesce(var.y, "alpine:3.20")}"
  list     = ["alpine:3.20", "alpine:3.20 "]
  heredoc  = <<EOT
"alpine:3.20"
EOT
}
`
	want := strings.NewReplacer(
		`default     = "alpine:3.20"`, `default     = "R/docker.io/library/alpine:3.20"`,
		`"${coalesce(var.y, "alpine:3.20")}"`, `"${coalesce(var.y, "R/docker.io/library/alpine:3.20")}"`,
		`["alpine:3.20", `, `["R/docker.io/library/alpine:3.20", `,
	).Replace(src)
	p := testfs.WriteFile(t, dir, "main.tf", src)
	got, err := RewriteImageRefs(dir, []string{"alpine:3.20"}, "R")
	if err != nil {
		t.Fatal(err)
	}
	if got["main.tf"] != 3 || len(got) != 1 {
		t.Errorf("counts = %v, want main.tf: 3", got)
	}
	if s := readString(t, p); s != want {
		t.Errorf("got:\n%s\nwant:\n%s", s, want)
	}
}

func TestRewriteImageRefsTreeAndUntouched(t *testing.T) {
	dir := t.TempDir()
	a := testfs.WriteFile(t, dir, "main.tf", "resource \"x\" \"a\" {\n  image = \"alpine:3.20\"\n  other = \"ghcr.io/coder/envbuilder:1.0.0\"\n}\n")
	b := testfs.WriteFile(t, dir, "modules/ws/nested/ws.tf", "resource \"x\" \"b\" { image = \"ghcr.io/coder/envbuilder:1.0.0\" }\n")
	untouchedSrc := "# no images here\nresource \"x\" \"c\" {\n  image = var.image   # \"alpine:3.20\"\n}\n"
	c := testfs.WriteFile(t, dir, "modules/none.tf", untouchedSrc)
	notTF := testfs.WriteFile(t, dir, "README.md", "image = \"alpine:3.20\"\n")
	cached := testfs.WriteFile(t, dir, ".terraform/modules/m/main.tf", "x = \"alpine:3.20\"\n")
	old := mustModTime(t, c)

	got, err := RewriteImageRefs(dir, []string{"docker.io/library/alpine:3.20", "ghcr.io/coder/envbuilder:1.0.0"}, "127.0.0.1:8443")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["main.tf"] != 2 || got["modules/ws/nested/ws.tf"] != 1 {
		t.Errorf("counts = %v", got)
	}
	if s := readString(t, a); !strings.Contains(s, `image = "127.0.0.1:8443/docker.io/library/alpine:3.20"`) ||
		!strings.Contains(s, `other = "127.0.0.1:8443/ghcr.io/coder/envbuilder:1.0.0"`) {
		t.Errorf("main.tf:\n%s", s)
	}
	if s := readString(t, b); s != "resource \"x\" \"b\" { image = \"127.0.0.1:8443/ghcr.io/coder/envbuilder:1.0.0\" }\n" {
		t.Errorf("ws.tf:\n%s", s)
	}
	if s := readString(t, c); s != untouchedSrc || !mustModTime(t, c).Equal(old) {
		t.Errorf("file without matches changed:\n%s", s)
	}
	if s := readString(t, notTF); s != "image = \"alpine:3.20\"\n" {
		t.Errorf("non-.tf file changed: %s", s)
	}
	if s := readString(t, cached); s != "x = \"alpine:3.20\"\n" {
		t.Errorf(".terraform file changed: %s", s)
	}

	// A second run finds nothing left to rewrite.
	again, err := RewriteImageRefs(dir, []string{"docker.io/library/alpine:3.20", "ghcr.io/coder/envbuilder:1.0.0"}, "127.0.0.1:8443")
	if err != nil || len(again) != 0 {
		t.Errorf("second run = %v, %v; want nothing", again, err)
	}
}

func TestRewriteImageRefsErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := RewriteImageRefs(dir, []string{"alpine:3.20"}, ""); err == nil {
		t.Error("empty registry accepted")
	}
	if _, err := RewriteImageRefs(dir, []string{"Not A Ref"}, "r"); err == nil {
		t.Error("bad ref accepted")
	}
	testfs.WriteFile(t, dir, "bad.tf", "x = \"unterminated\n")
	if _, err := RewriteImageRefs(dir, []string{"alpine:3.20"}, "r"); err == nil {
		t.Error("unlexable file accepted")
	}
}

func mustModTime(t *testing.T, p string) time.Time {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}
