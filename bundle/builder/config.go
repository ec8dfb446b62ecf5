package builder

import (
	"bytes"
	"crypto"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/hashicorp/go-version"
	"go.yaml.in/yaml/v3"
	"golang.org/x/mod/semver"

	"airgapcoder/mirror"
)

// ConfigVersion is the only bundle.yaml version this package reads.
const ConfigVersion = 1

// DefaultMavenRepository is where postgres {version} archives come from
// unless postgres.repository_url says otherwise.
const DefaultMavenRepository = "https://repo1.maven.org/maven2/"

// SupportedPlatforms are the platforms a bundle may list, "os/arch".
var SupportedPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"}

// Config is a parsed and checked bundle.yaml (version 1, see CONTRACT.md):
// what a bundle holds and where each part comes from. Paths are absolute,
// resolved against the folder of the file. Every entry keeps the Origin it
// was declared at, so a failure while building names the line.
type Config struct {
	// File is the path of bundle.yaml as the caller gave it; messages use it.
	File string
	// Dir is the folder that relative paths in the file are resolved against.
	Dir string
	// Name is the bundle's name, such as "acme-coder".
	Name string
	// Release is the bundle's version, such as "2026.11.1".
	Release string
	// Platforms are the targets, in the order listed; never empty.
	Platforms []mirror.Platform
	// Coder lists where the coder binaries come from; together they cover
	// every platform. Nil when the file has no coder entry.
	Coder []CoderSource
	// Terraform is the pinned terraform, nil when the bundle carries none.
	Terraform *TerraformSource
	// Postgres is the embedded PostgreSQL, nil when the bundle carries none.
	Postgres *PostgresSource
	// Providers are the provider entries, in file order.
	Providers []ProviderSource
	// Images are the container images, in file order.
	Images []ImageSource
	// Templates are the template folders, in file order.
	Templates []TemplateSource
	// Certs are the CA certificate files, in file order.
	Certs []CertSource
	// Modules are the Terraform registry modules, in file order.
	Modules []ModuleSource
	// Verify are the signature rules of images:, in file order.
	Verify []VerifyRule
	// Registries maps a host ("registry.terraform.io", "docker.io") to the
	// base URL that replaces "https://<host>/" in every request to it. Nil
	// when there are no overrides.
	Registries map[string]string
}

// Origin is where an entry was declared.
type Origin struct {
	// File is the bundle.yaml path as given.
	File string
	// Line is the 1-based line of the entry.
	Line int
	// Field is the entry's path in the file, such as "providers[1]".
	Field string
}

// String returns "file:line: field".
func (o Origin) String() string { return fmt.Sprintf("%s:%d: %s", o.File, o.Line, o.Field) }

// CoderSource is one coder entry: the running binary or a file.
type CoderSource struct {
	Origin
	// Self is true for {binary: self}: the running executable, for the
	// build host's platform.
	Self bool
	// Path is the binary for {path: …}.
	Path string
	// Platform is the binary's platform: given ({path, platform}), read from
	// the executable's header, or the build host's for self.
	Platform mirror.Platform
}

// TerraformSource is the terraform entry.
type TerraformSource struct {
	Origin
	// Version is the exact version, such as "1.11.4".
	Version string
	// Path is a local binary that must be exactly Version; empty means
	// HashiCorp's releases (GPG-verified by hc-install).
	Path string
}

// PostgresSource is the postgres entry.
type PostgresSource struct {
	Origin
	// Version is the zonky embedded-postgres-binaries version ("16.9.0").
	// With Path it must match the installation's version, when given.
	Version string
	// Path is a local installation in Debian's layout
	// (/usr/lib/postgresql/15) to repack; empty means Maven.
	Path string
	// RepositoryURL is the Maven repository's base URL, ending in "/".
	RepositoryURL string
}

// ProviderSource is one providers entry: a registry source or a folder.
type ProviderSource struct {
	Origin
	// Source is the provider address for {source, versions}.
	Source mirror.ProviderAddress
	// Versions are the versions to fetch, in file order.
	Versions []string
	// Path is a folder in `terraform providers mirror` layout for {path}.
	Path string
}

// ModuleSource is one modules entry: a registry module at the newest
// version that meets Version (a constraint), or, with Path, a local folder
// served as Source at Version (an exact version).
type ModuleSource struct {
	Origin
	// Source is HOST/NAMESPACE/NAME/SYSTEM (registry.terraform.io when the
	// file gives NAMESPACE/NAME/SYSTEM).
	Source  string
	Version string
	// Path is the local folder (absolute), "" for a registry module.
	Path string
}

// VerifyRule is one verify entry: the images whose names match Images
// (path.Match over HOST/PATH, no tag) must carry a cosign signature that
// Key verifies.
type VerifyRule struct {
	Origin
	Images  string
	KeyFile string
	Key     crypto.PublicKey
}

// ImageSource is one images entry.
type ImageSource struct {
	Origin
	// Ref is the reference as written.
	Ref string
	// Name is the full reference: registry host ("docker.io" for Docker
	// Hub), repository, and ":tag" and/or "@digest". It becomes the image's
	// org.opencontainers.image.ref.name annotation.
	Name string
}

// TemplateSource is one templates entry.
type TemplateSource struct {
	Origin
	// Path is the template folder.
	Path string
	// Name is the folder's base name: the template's folder in the bundle.
	Name string
}

// CertSource is one certs entry.
type CertSource struct {
	Origin
	// Path is the PEM file.
	Path string
	// Name is the file name without its extension: certs/<name>.pem.
	Name string
}

// ConfigError is a mistake in bundle.yaml, at a line and a field.
type ConfigError struct {
	// File is the bundle.yaml path as given.
	File string
	// Line is the 1-based line of the mistake.
	Line int
	// Field is the path of the field, such as "providers[1].versions[0]";
	// empty for a mistake in the YAML syntax.
	Field string
	// Msg says what is wrong.
	Msg string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

// LoadConfig reads and checks the bundle.yaml at path.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read bundle config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(data, path, filepath.Dir(abs))
}

// ParseConfig parses bundle.yaml content. file names it in messages; dir is
// the folder relative paths are resolved against. Unknown fields, duplicate
// entries, bad versions, references and platforms, and paths that do not
// exist are errors (*ConfigError) that name the line and the field.
func ParseConfig(data []byte, file, dir string) (*Config, error) {
	p := &configParser{file: file, dir: dir, cfg: &Config{File: file, Dir: dir}}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, p.yamlError(err)
	}
	if len(doc.Content) == 0 {
		return nil, &ConfigError{File: file, Line: 1, Msg: "empty file; want version: 1, name, release, platforms"}
	}
	if err := p.top(doc.Content[0]); err != nil {
		return nil, err
	}
	return p.cfg, nil
}

type configParser struct {
	file string
	dir  string
	cfg  *Config
}

var yamlLine = regexp.MustCompile(`^yaml: line ([0-9]+): (.*)$`)

func (p *configParser) yamlError(err error) error {
	line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	if strings.Contains(msg, "tab character") {
		msg += " (indent with spaces)"
	}
	return &ConfigError{File: p.file, Line: line, Msg: "not valid YAML: " + msg}
}

func (p *configParser) errorf(n *yaml.Node, field, format string, args ...any) error {
	return &ConfigError{File: p.file, Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func (p *configParser) origin(n *yaml.Node, field string) Origin {
	return Origin{File: p.file, Line: n.Line, Field: field}
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// fields walks a mapping, rejecting duplicate and unknown keys; handlers
// get the value node and the field path.
func (p *configParser) fields(n *yaml.Node, field string, handlers map[string]func(v *yaml.Node, field string) error) error {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return p.errorf(n, field, "want a mapping, got %s", kindName(n))
	}
	known := make([]string, 0, len(handlers))
	for k := range handlers {
		known = append(known, k)
	}
	slices.Sort(known)
	seen := map[string]int{} // key → line
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		sub := k.Value
		if field != "" {
			sub = field + "." + k.Value
		}
		if k.Kind != yaml.ScalarNode {
			return p.errorf(k, field, "keys must be plain names")
		}
		if first, ok := seen[k.Value]; ok {
			return p.errorf(k, sub, "defined twice (first at line %d)", first)
		}
		seen[k.Value] = k.Line
		h, ok := handlers[k.Value]
		if !ok {
			return p.errorf(k, sub, "unknown field (known: %s)", strings.Join(known, ", "))
		}
		if err := h(v, sub); err != nil {
			return err
		}
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

func (p *configParser) str(n *yaml.Node, field string, out *string) error {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || n.Value == "" {
		return p.errorf(n, field, "want a non-empty string, got %s", kindName(n))
	}
	*out = n.Value
	return nil
}

// strMatching is str for a string that must match re; want says what it
// must be, for the error.
func (p *configParser) strMatching(n *yaml.Node, field string, out *string, re *regexp.Regexp, want string) error {
	if err := p.str(n, field, out); err != nil {
		return err
	}
	if !re.MatchString(*out) {
		return p.errorf(n, field, "%q is not %s", *out, want)
	}
	return nil
}

func (p *configParser) list(n *yaml.Node, field string, each func(i int, v *yaml.Node, field string) error) error {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		return p.errorf(n, field, "want a list, got %s", kindName(n))
	}
	for i, v := range n.Content {
		if err := each(i, resolve(v), fmt.Sprintf("%s[%d]", field, i)); err != nil {
			return err
		}
	}
	return nil
}

// path resolves a path from the file against its folder and checks that it
// exists and is a folder (dir) or a regular file.
func (p *configParser) path(n *yaml.Node, field, value string, dir bool) (string, error) {
	abs := value
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(p.dir, value)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if dir {
			return "", p.errorf(n, field, "%s: no such folder", value)
		}
		return "", p.errorf(n, field, "%s: no such file", value)
	case err != nil:
		return "", p.errorf(n, field, "%s: %v", value, err)
	case dir && !st.IsDir():
		return "", p.errorf(n, field, "%s is not a folder", value)
	case !dir && !st.Mode().IsRegular():
		return "", p.errorf(n, field, "%s is not a regular file", value)
	}
	return abs, nil
}

var (
	bundleNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	releasePattern    = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._+-]{0,62}$`)
	postgresVersion   = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
	registryHost      = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$`)
)

// isSemver reports whether v is a semantic version without a leading "v"
// (the form Terraform and its registries use).
func isSemver(v string) bool {
	return !strings.HasPrefix(v, "v") && semver.IsValid("v"+v) && semver.Canonical("v"+v) == "v"+v
}

func (p *configParser) top(n *yaml.Node) error {
	cfg := p.cfg
	var versionNode *yaml.Node
	required := map[string]bool{}
	if r := resolve(n); r.Kind != yaml.MappingNode {
		return p.errorf(r, "", "want a mapping of version: 1, name, release, platforms and the sources, got %s", kindName(r))
	}
	err := p.fields(n, "", map[string]func(*yaml.Node, string) error{
		"version": func(v *yaml.Node, f string) error {
			versionNode = resolve(v)
			required[f] = true
			if versionNode.Kind != yaml.ScalarNode || versionNode.Value != strconv.Itoa(ConfigVersion) {
				return p.errorf(versionNode, f, "%s is not a supported version (want %d)", kindName(versionNode), ConfigVersion)
			}
			return nil
		},
		"name": func(v *yaml.Node, f string) error {
			required[f] = true
			return p.strMatching(v, f, &cfg.Name, bundleNamePattern, "a bundle name (lower-case letters, digits, '.', '_', '-'; at most 63 characters)")
		},
		"release": func(v *yaml.Node, f string) error {
			required[f] = true
			return p.strMatching(v, f, &cfg.Release, releasePattern, "a release (letters, digits, '.', '_', '+', '-'; at most 63 characters)")
		},
		"platforms": func(v *yaml.Node, f string) error {
			required[f] = true
			return p.platforms(v, f)
		},
		"coder":      p.coder,
		"terraform":  p.terraform,
		"postgres":   p.postgres,
		"providers":  p.providers,
		"images":     p.images,
		"templates":  p.templates,
		"certs":      p.certs,
		"registries": p.registries,
		"verify":     p.verify,
		"modules":    p.modules,
	})
	if err != nil {
		return err
	}
	for _, f := range []string{"version", "name", "release", "platforms"} {
		if !required[f] {
			return &ConfigError{File: p.file, Line: resolve(n).Line, Field: f, Msg: "missing (version: 1, name, release and platforms are required)"}
		}
	}
	return p.checkCoverage()
}

func (p *configParser) platforms(n *yaml.Node, field string) error {
	seen := map[mirror.Platform]bool{}
	err := p.list(n, field, func(_ int, v *yaml.Node, f string) error {
		var s string
		if err := p.str(v, f, &s); err != nil {
			return err
		}
		pl, err := parsePlatform(s)
		if err != nil {
			return p.errorf(v, f, "%v", err)
		}
		if seen[pl] {
			return p.errorf(v, f, "%s is listed twice", s)
		}
		seen[pl] = true
		p.cfg.Platforms = append(p.cfg.Platforms, pl)
		return nil
	})
	if err != nil {
		return err
	}
	if len(p.cfg.Platforms) == 0 {
		return p.errorf(resolve(n), field, "empty; list at least one of %s", strings.Join(SupportedPlatforms, ", "))
	}
	return nil
}

// parsePlatform parses "os/arch" and checks it is supported.
func parsePlatform(s string) (mirror.Platform, error) {
	os, arch, ok := strings.Cut(s, "/")
	pl := mirror.Platform{OS: os, Arch: arch}
	if !ok || os == "" || arch == "" || strings.Contains(arch, "/") {
		return pl, fmt.Errorf("%q is not a platform (want os/arch, such as linux/amd64)", s)
	}
	if !slices.Contains(SupportedPlatforms, s) {
		return pl, fmt.Errorf("%q is not a supported platform (supported: %s)", s, strings.Join(SupportedPlatforms, ", "))
	}
	return pl, nil
}

// slashPlatform writes a platform as bundle.yaml does: "linux/amd64".
func slashPlatform(p mirror.Platform) string { return p.OS + "/" + p.Arch }

func (p *configParser) coder(n *yaml.Node, field string) error {
	n = resolve(n)
	if n.Kind == yaml.SequenceNode {
		return p.list(n, field, func(_ int, v *yaml.Node, f string) error { return p.coderEntry(v, f) })
	}
	return p.coderEntry(n, field)
}

func (p *configParser) coderEntry(n *yaml.Node, field string) error {
	src := CoderSource{Origin: p.origin(resolve(n), field)}
	var binary, path, platform string
	var pathNode, platformNode *yaml.Node
	err := p.fields(n, field, map[string]func(*yaml.Node, string) error{
		"binary": func(v *yaml.Node, f string) error {
			if err := p.str(v, f, &binary); err != nil {
				return err
			}
			if binary != "self" {
				return p.errorf(v, f, "%q is not a binary source (want self, or use path)", binary)
			}
			return nil
		},
		"path":     func(v *yaml.Node, f string) error { pathNode = resolve(v); return p.str(v, f, &path) },
		"platform": func(v *yaml.Node, f string) error { platformNode = resolve(v); return p.str(v, f, &platform) },
	})
	if err != nil {
		return err
	}
	switch {
	case binary != "" && path != "":
		return p.errorf(resolve(n), field, "binary and path exclude each other: {binary: self} for this host's coder, or {path: FILE} for a binary")
	case binary == "" && path == "":
		return p.errorf(resolve(n), field, "want {binary: self} or {path: FILE}")
	case binary != "" && platformNode != nil:
		return p.errorf(platformNode, field+".platform", "{binary: self} is for this host's platform; use path for another")
	}
	if binary != "" {
		src.Self = true
		src.Platform = hostPlatform()
	} else {
		abs, err := p.path(pathNode, field+".path", path, false)
		if err != nil {
			return err
		}
		src.Path = abs
		detected, derr := executablePlatform(abs)
		if platformNode != nil {
			pl, err := parsePlatform(platform)
			if err != nil {
				return p.errorf(platformNode, field+".platform", "%v", err)
			}
			if derr == nil && detected != pl {
				return p.errorf(platformNode, field+".platform", "%s is a %s executable, not %s", path, slashPlatform(detected), platform)
			}
			src.Platform = pl
		} else {
			switch {
			case errors.Is(derr, errNotExecutable):
				return p.errorf(pathNode, field+".path", "%s is %v: want a coder binary", path, derr)
			case derr != nil:
				return p.errorf(pathNode, field+".path", "%s: %v; say which platform it is for with platform: os/arch", path, derr)
			}
			src.Platform = detected
		}
	}
	for _, other := range p.cfg.Coder {
		if other.Platform == src.Platform {
			return p.errorf(resolve(n), field, "a second coder binary for %s (the first is at line %d)", slashPlatform(src.Platform), other.Line)
		}
	}
	p.cfg.Coder = append(p.cfg.Coder, src)
	return nil
}

func (p *configParser) terraform(n *yaml.Node, field string) error {
	src := &TerraformSource{Origin: p.origin(resolve(n), field)}
	var pathNode *yaml.Node
	err := p.fields(n, field, map[string]func(*yaml.Node, string) error{
		"version": func(v *yaml.Node, f string) error {
			if err := p.str(v, f, &src.Version); err != nil {
				return err
			}
			if !isSemver(src.Version) || strings.Contains(src.Version, "+") {
				return p.errorf(v, f, "%q is not a version (want an exact version such as 1.11.4)", src.Version)
			}
			return nil
		},
		"path": func(v *yaml.Node, f string) error { pathNode = resolve(v); return p.str(v, f, &src.Path) },
	})
	if err != nil {
		return err
	}
	if src.Version == "" {
		return p.errorf(resolve(n), field+".version", "missing: pin terraform to an exact version, such as version: 1.11.4")
	}
	if src.Path != "" {
		if src.Path, err = p.path(pathNode, field+".path", src.Path, false); err != nil {
			return err
		}
	}
	p.cfg.Terraform = src
	return nil
}

func (p *configParser) postgres(n *yaml.Node, field string) error {
	src := &PostgresSource{Origin: p.origin(resolve(n), field)}
	var pathNode, repoNode *yaml.Node
	err := p.fields(n, field, map[string]func(*yaml.Node, string) error{
		"version": func(v *yaml.Node, f string) error {
			return p.strMatching(v, f, &src.Version, postgresVersion, "a version (want MAJOR.MINOR.PATCH, such as 16.9.0)")
		},
		"path":           func(v *yaml.Node, f string) error { pathNode = resolve(v); return p.str(v, f, &src.Path) },
		"repository_url": func(v *yaml.Node, f string) error { repoNode = resolve(v); return p.str(v, f, &src.RepositoryURL) },
	})
	if err != nil {
		return err
	}
	switch {
	case src.Path == "" && src.Version == "":
		return p.errorf(resolve(n), field, "want {version: X.Y.Z} or {path: /usr/lib/postgresql/N}")
	case src.Path != "" && repoNode != nil:
		return p.errorf(repoNode, field+".repository_url", "only for {version}: a local installation is not downloaded")
	}
	if src.Path != "" {
		if src.Path, err = p.path(pathNode, field+".path", src.Path, true); err != nil {
			return err
		}
	}
	if src.Path == "" {
		if repoNode == nil {
			src.RepositoryURL = DefaultMavenRepository
		} else {
			u, err := baseURL(src.RepositoryURL)
			if err != nil {
				return p.errorf(repoNode, field+".repository_url", "%v", err)
			}
			src.RepositoryURL = u
		}
	}
	p.cfg.Postgres = src
	return nil
}

// baseURL checks an https base URL and returns it ending in "/".
func baseURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%q is not a URL", s)
	}
	if u.Scheme != "https" {
		return "", fmt.Errorf("%q: want an https URL", s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("%q: want a plain base URL (no user, query or fragment)", s)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u.String(), nil
}

func (p *configParser) providers(n *yaml.Node, field string) error {
	return p.list(n, field, func(_ int, v *yaml.Node, f string) error {
		src := ProviderSource{Origin: p.origin(v, f)}
		var source, path string
		var pathNode, versionsNode *yaml.Node
		err := p.fields(v, f, map[string]func(*yaml.Node, string) error{
			"source": func(v *yaml.Node, f string) error {
				if err := p.str(v, f, &source); err != nil {
					return err
				}
				addr, err := mirror.ParseProviderAddress(source)
				if err != nil {
					return p.errorf(v, f, "%q is not a provider source address (want [host/]namespace/type)", source)
				}
				src.Source = addr
				return nil
			},
			"versions": func(v *yaml.Node, f string) error {
				versionsNode = resolve(v)
				return p.list(v, f, func(_ int, v *yaml.Node, f string) error {
					var s string
					if err := p.str(v, f, &s); err != nil {
						return err
					}
					if !isSemver(s) {
						return p.errorf(v, f, "%q is not a version (want an exact version such as 2.1.0)", s)
					}
					if slices.Contains(src.Versions, s) {
						return p.errorf(v, f, "%q is listed twice", s)
					}
					src.Versions = append(src.Versions, s)
					return nil
				})
			},
			"path": func(v *yaml.Node, f string) error { pathNode = resolve(v); return p.str(v, f, &path) },
		})
		if err != nil {
			return err
		}
		switch {
		case path != "" && (source != "" || versionsNode != nil):
			return p.errorf(v, f, "path excludes source and versions: a folder ({path: FOLDER}) or a registry source ({source, versions}), one per entry")
		case path != "":
			if src.Path, err = p.path(pathNode, f+".path", path, true); err != nil {
				return err
			}
		case source == "":
			return p.errorf(v, f, "want {source: HOST/NAMESPACE/TYPE, versions: [...]} or {path: FOLDER}")
		case len(src.Versions) == 0:
			return p.errorf(v, f+".versions", "missing or empty: list the versions to bundle")
		}
		for _, other := range p.cfg.Providers {
			if src.Path == "" && other.Source == src.Source {
				return p.errorf(v, f+".source", "%s is listed twice (first at line %d)", src.Source, other.Line)
			}
			if src.Path != "" && other.Path == src.Path {
				return p.errorf(v, f+".path", "%s is listed twice (first at line %d)", path, other.Line)
			}
		}
		p.cfg.Providers = append(p.cfg.Providers, src)
		return nil
	})
}

func (p *configParser) images(n *yaml.Node, field string) error {
	return p.list(n, field, func(_ int, v *yaml.Node, f string) error {
		var ref string
		if err := p.str(v, f, &ref); err != nil {
			return err
		}
		full, err := fullImageName(ref)
		if err != nil {
			return p.errorf(v, f, "%v", err)
		}
		for _, other := range p.cfg.Images {
			if other.Name == full {
				return p.errorf(v, f, "%s is listed twice (first at line %d as %s)", ref, other.Line, other.Ref)
			}
		}
		p.cfg.Images = append(p.cfg.Images, ImageSource{Origin: p.origin(v, f), Ref: ref, Name: full})
		return nil
	})
}

// fullImageName turns a reference as people write it ("alpine:3.20") into
// the full one the bundle records ("docker.io/library/alpine:3.20"), the way
// the mirror reads it back (mirror.ParseImageRef): the registry host
// ("docker.io" for Docker Hub), the repository, the tag ("latest" when
// neither tag nor digest is given) and the digest.
func fullImageName(ref string) (string, error) {
	r, err := mirror.ParseImageRef(ref)
	if err != nil {
		return "", err
	}
	if _, err := remoteRef(r.String()); err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	return r.String(), nil
}

// remoteRef is the go-containerregistry reference to fetch a full image
// name from: by digest when it has one (a tag beside it is only a label).
func remoteRef(full string) (name.Reference, error) {
	r, err := mirror.ParseImageRef(full)
	if err != nil {
		return nil, err
	}
	repo := r.Host + "/" + r.Path
	if r.Digest != "" {
		return name.NewDigest(repo+"@"+r.Digest, name.StrictValidation)
	}
	return name.NewTag(repo+":"+r.Tag, name.StrictValidation)
}

func (p *configParser) templates(n *yaml.Node, field string) error {
	return p.list(n, field, func(_ int, v *yaml.Node, f string) error {
		var path string
		if err := p.str(v, f, &path); err != nil {
			return err
		}
		abs, err := p.path(v, f, path, true)
		if err != nil {
			return err
		}
		tfs, _ := filepath.Glob(filepath.Join(abs, "*.tf"))
		if len(tfs) == 0 {
			return p.errorf(v, f, "%s holds no .tf file", path)
		}
		src := TemplateSource{Origin: p.origin(v, f), Path: abs, Name: filepath.Base(abs)}
		if !templateName.MatchString(src.Name) {
			return p.errorf(v, f, "%q is not a usable template name (letters, digits, '.', '_', '-')", src.Name)
		}
		for _, other := range p.cfg.Templates {
			if other.Name == src.Name {
				return p.errorf(v, f, "a second template named %q (the first is at line %d)", src.Name, other.Line)
			}
		}
		p.cfg.Templates = append(p.cfg.Templates, src)
		return nil
	})
}

var templateName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func (p *configParser) certs(n *yaml.Node, field string) error {
	return p.list(n, field, func(_ int, v *yaml.Node, f string) error {
		var path string
		if err := p.str(v, f, &path); err != nil {
			return err
		}
		abs, err := p.path(v, f, path, false)
		if err != nil {
			return err
		}
		base := filepath.Base(abs)
		src := CertSource{Origin: p.origin(v, f), Path: abs, Name: strings.TrimSuffix(base, filepath.Ext(base))}
		if !templateName.MatchString(src.Name) {
			return p.errorf(v, f, "%q is not a usable certificate name (letters, digits, '.', '_', '-')", src.Name)
		}
		for _, other := range p.cfg.Certs {
			if other.Name == src.Name {
				return p.errorf(v, f, "a second certificate named %q (the first is at line %d)", src.Name, other.Line)
			}
		}
		p.cfg.Certs = append(p.cfg.Certs, src)
		return nil
	})
}

func (p *configParser) registries(n *yaml.Node, field string) error {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return p.errorf(n, field, "want a mapping of host: https://base-url/, got %s", kindName(n))
	}
	p.cfg.Registries = map[string]string{}
	lines := map[string]int{} // host → line
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		f := field + "." + k.Value
		host := strings.ToLower(k.Value)
		if k.Kind != yaml.ScalarNode || !registryHost.MatchString(host) {
			return p.errorf(k, f, "%q is not a host name (write HOST: https://base-url/, such as docker.io: https://mirror.corp/)", k.Value)
		}
		if first, dup := lines[host]; dup {
			return p.errorf(k, f, "defined twice (first at line %d; host names ignore case)", first)
		}
		lines[host] = k.Line
		var s string
		if err := p.str(v, f, &s); err != nil {
			return err
		}
		u, err := baseURL(s)
		if err != nil {
			return p.errorf(v, f, "%v", err)
		}
		p.cfg.Registries[host] = u
	}
	return nil
}

func (p *configParser) modules(n *yaml.Node, field string) error {
	return p.list(n, field, func(_ int, v *yaml.Node, f string) error {
		src := ModuleSource{Origin: p.origin(v, f)}
		err := p.fields(v, f, map[string]func(*yaml.Node, string) error{
			"source": func(v *yaml.Node, f string) error {
				var s string
				if err := p.str(v, f, &s); err != nil {
					return err
				}
				addr, err := mirror.ParseModuleSource(s)
				if err != nil {
					return p.errorf(v, f, "%v", err)
				}
				src.Source = addr
				return nil
			},
			"version": func(v *yaml.Node, f string) error {
				return p.str(v, f, &src.Version)
			},
			"path": func(v *yaml.Node, f string) error {
				var s string
				if err := p.str(v, f, &s); err != nil {
					return err
				}
				abs, err := p.path(v, f, s, true)
				if err != nil {
					return err
				}
				src.Path = abs
				return nil
			},
		})
		if err != nil {
			return err
		}
		if src.Source == "" || src.Version == "" {
			return p.errorf(v, f, "needs source: (HOST/NAMESPACE/NAME/SYSTEM) and version: (a constraint such as \"~> 1.0\", or with path: an exact version)")
		}
		if src.Path != "" {
			if _, err := version.NewSemver(src.Version); err != nil || strings.ContainsAny(src.Version, "<>=~!, ") {
				return p.errorf(v, f+".version", "%q is not an exact version (a local folder is served as one version, such as 1.0.0)", src.Version)
			}
		} else if _, err := version.NewConstraint(src.Version); err != nil {
			return p.errorf(v, f+".version", "%q is not a version constraint (such as \"~> 1.0\" or \"1.2.3\")", src.Version)
		}
		for _, other := range p.cfg.Modules {
			if other.Source == src.Source {
				return p.errorf(v, f+".source", "%s is listed twice (first at line %d)", src.Source, other.Line)
			}
		}
		p.cfg.Modules = append(p.cfg.Modules, src)
		return nil
	})
}

func (p *configParser) verify(n *yaml.Node, field string) error {
	return p.list(n, field, func(_ int, v *yaml.Node, f string) error {
		rule := VerifyRule{Origin: p.origin(v, f)}
		err := p.fields(v, f, map[string]func(*yaml.Node, string) error{
			"images": func(v *yaml.Node, f string) error {
				if err := p.str(v, f, &rule.Images); err != nil {
					return err
				}
				if _, err := path.Match(rule.Images, ""); err != nil || rule.Images == "" {
					return p.errorf(v, f, "%q is not a pattern (HOST/PATH with * and ?, such as ghcr.io/acme/*)", rule.Images)
				}
				return nil
			},
			"key": func(v *yaml.Node, f string) error {
				var file string
				if err := p.str(v, f, &file); err != nil {
					return err
				}
				abs, err := p.path(v, f, file, false)
				if err != nil {
					return err
				}
				key, err := readCosignKey(abs)
				if err != nil {
					return p.errorf(v, f, "%v", err)
				}
				rule.KeyFile, rule.Key = file, key
				return nil
			},
		})
		if err != nil {
			return err
		}
		if rule.Images == "" || rule.Key == nil {
			return p.errorf(v, f, "needs images: (a pattern) and key: (a cosign public key file)")
		}
		p.cfg.Verify = append(p.cfg.Verify, rule)
		return nil
	})
}

// checkCoverage checks what needs the whole file: coder binaries for every
// platform, and images for every verify rule.
func (p *configParser) checkCoverage() error {
	for _, r := range p.cfg.Verify {
		if !slices.ContainsFunc(p.cfg.Images, r.matches) {
			return &ConfigError{File: p.file, Line: r.Line, Field: r.Field + ".images", Msg: fmt.Sprintf("%q matches none of the images (patterns match HOST/PATH without the tag, such as docker.io/library/*)", r.Images)}
		}
	}
	if len(p.cfg.Coder) == 0 {
		return nil
	}
	for _, c := range p.cfg.Coder {
		if !slices.Contains(p.cfg.Platforms, c.Platform) {
			return &ConfigError{File: p.file, Line: c.Line, Field: c.Field, Msg: fmt.Sprintf("a %s binary, but platforms does not list %s: add it to platforms or remove this entry", slashPlatform(c.Platform), slashPlatform(c.Platform))}
		}
	}
	for _, pl := range p.cfg.Platforms {
		if !slices.ContainsFunc(p.cfg.Coder, func(c CoderSource) bool { return c.Platform == pl }) {
			c := p.cfg.Coder[0]
			return &ConfigError{File: p.file, Line: c.Line, Field: "coder", Msg: fmt.Sprintf("no binary for %s (add {path: FILE, platform: %s})", slashPlatform(pl), slashPlatform(pl))}
		}
	}
	return nil
}
