package mirror

import (
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

// FuzzParseImageRef checks the image reference parser that bundles, the
// registry and push-images share.
//
// Properties: no panic; an accepted reference is normalised (lower-case
// host, Docker Hub as docker.io with library/ for one-element paths, a tag
// or a digest), its String parses back to the same ImageRef, its
// Repository is a valid repository path without the host's colon, and
// go-containerregistry (which push-images and the bundle builder hand it
// to) accepts it too, unless it is longer than the 255 characters that
// registries allow a repository.
func FuzzParseImageRef(f *testing.F) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, s := range []string{
		"docker.io/library/alpine:3.20", "alpine", "coder/envbuilder:1.0.0", "index.docker.io/library/busybox:1",
		"ghcr.io/coder/envbuilder:1.0.0@" + digest, "ghcr.io/coder/envbuilder@" + digest,
		"registry.internal:5000/team/app:3", "localhost/app", "Harbor.Corp/a/b/c:x", "registry-1.docker.io/x",
		"a.b/c__d/e--f.g_h:v1.2-rc_3",
		// Broken.
		"", "UPPER/case", "a//b", "x@sha256:short", "host/p:bad tag", "[::1]:5000/x", ":5000/x", "x:", "@" + digest, "x:y:z",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			t.Skip("input over the size cap")
		}
		r, err := ParseImageRef(s)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid image reference") {
				t.Fatalf("error %q does not say what it refuses", err)
			}
			return
		}
		switch {
		case r.Host == "" || r.Path == "":
			t.Fatalf("%q: accepted %+v without a host or path", s, r)
		case r.Host != strings.ToLower(r.Host):
			t.Fatalf("%q: host %q is not lower case", s, r.Host)
		case r.Host == "index.docker.io" || r.Host == "registry-1.docker.io":
			t.Fatalf("%q: Docker Hub host %q not normalised", s, r.Host)
		case r.Host == DockerHubHost && !strings.Contains(r.Path, "/"):
			t.Fatalf("%q: Docker Hub path %q without a namespace", s, r.Path)
		case r.Tag == "" && r.Digest == "":
			t.Fatalf("%q: neither tag nor digest", s)
		case strings.Contains(r.Repository(), ":"):
			t.Fatalf("%q: repository %q holds a colon", s, r.Repository())
		}

		again, err := ParseImageRef(r.String())
		if err != nil {
			t.Fatalf("%q parsed as %q, which does not parse: %v", s, r.String(), err)
		}
		if again != r {
			t.Fatalf("%q parsed as %+v; its String %q parses as %+v", s, r, r.String(), again)
		}

		repo := r.Host + "/" + r.Path
		if len(r.Repository()) > 255 || len(r.Path) > 255 {
			return
		}
		if _, err := name.NewRepository("registry.corp/"+r.Repository(), name.StrictValidation); err != nil {
			t.Fatalf("%q: push-images repository %q: %v", s, r.Repository(), err)
		}
		if r.Tag != "" {
			if _, err := name.NewTag(repo+":"+r.Tag, name.StrictValidation); err != nil {
				t.Fatalf("%q: go-containerregistry refuses %s:%s: %v", s, repo, r.Tag, err)
			}
		}
		if r.Digest != "" {
			if _, err := name.NewDigest(repo+"@"+r.Digest, name.StrictValidation); err != nil {
				t.Fatalf("%q: go-containerregistry refuses %s@%s: %v", s, repo, r.Digest, err)
			}
		}
	})
}
