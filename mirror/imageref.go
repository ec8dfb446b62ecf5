package mirror

import (
	"fmt"
	"regexp"
	"strings"
)

// Annotations of an OCI layout's index.json that name an image.
const (
	// RefNameAnnotation holds the image's original full reference, such as
	// "docker.io/library/alpine:3.20", in the layouts bundles write.
	RefNameAnnotation = "org.opencontainers.image.ref.name"
	// containerdNameAnnotation is where containerd's exports keep the full
	// reference; read when RefNameAnnotation holds only a tag.
	containerdNameAnnotation = "io.containerd.image.name"
)

// DockerHubHost is how image references from Docker Hub are written (Docker's
// own aliases index.docker.io and registry-1.docker.io become this).
const DockerHubHost = "docker.io"

// ImageRef is an image reference as a bundle records it, normalised the way
// Docker does: "alpine:3.20" is Host "docker.io", Path "library/alpine", Tag
// "3.20".
type ImageRef struct {
	// Host is the registry host the image came from, lower case, with a
	// ":port" when it had one.
	Host string
	// Path is the repository path inside Host, such as "library/alpine".
	Path string
	// Tag is the tag, empty for a reference by digest only.
	Tag string
	// Digest is the "sha256:…" digest when the reference carried one.
	Digest string
}

var (
	pathComponent = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$`)
	tagPattern    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	hostPattern   = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$`)
)

// ParseImageRef parses a reference such as "docker.io/library/alpine:3.20",
// "ghcr.io/coder/envbuilder:1.0.0@sha256:…" or "alpine".
func ParseImageRef(s string) (ImageRef, error) {
	var r ImageRef
	rest := s
	if name, digest, ok := strings.Cut(rest, "@"); ok {
		if !digestPattern.MatchString(digest) {
			return r, fmt.Errorf("invalid image reference %q: bad digest %q", s, digest)
		}
		r.Digest, rest = digest, name
	}
	if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		r.Tag, rest = rest[i+1:], rest[:i]
		if !tagPattern.MatchString(r.Tag) {
			return r, fmt.Errorf("invalid image reference %q: bad tag %q", s, r.Tag)
		}
	}
	if r.Tag == "" && r.Digest == "" {
		r.Tag = "latest"
	}
	parts := strings.Split(rest, "/")
	if len(parts) > 1 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		r.Host, parts = strings.ToLower(parts[0]), parts[1:]
	} else {
		r.Host = DockerHubHost
	}
	switch r.Host {
	case "index.docker.io", "registry-1.docker.io":
		r.Host = DockerHubHost
	}
	if r.Host == DockerHubHost && len(parts) == 1 {
		parts = []string{"library", parts[0]}
	}
	if !hostPattern.MatchString(r.Host) {
		return r, fmt.Errorf("invalid image reference %q: bad registry host %q", s, r.Host)
	}
	for _, p := range parts {
		if !pathComponent.MatchString(p) {
			return r, fmt.Errorf("invalid image reference %q: bad path component %q (lower-case letters, digits and separators)", s, p)
		}
	}
	r.Path = strings.Join(parts, "/")
	return r, nil
}

// String returns the normalised reference.
func (r ImageRef) String() string {
	return r.Host + "/" + r.Path + r.tagAndDigest()
}

// tagAndDigest is what follows the repository in a reference: ":TAG",
// "@DIGEST", both, or nothing.
func (r ImageRef) tagAndDigest() string {
	s := ""
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// Repository returns the repository the mirror serves the image as, and
// push-images writes it under: the original host as the first path
// component, then the path ("docker.io/library/alpine"). A host's ":port"
// becomes "_port", because a colon cannot appear in a repository path.
func (r ImageRef) Repository() string {
	return strings.ReplaceAll(r.Host, ":", "_") + "/" + r.Path
}
