package builder

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// canonicalConfig writes cfg back as bundle.yaml: every path absolute,
// every image by its full name, every default spelled out.
func canonicalConfig(tb testing.TB, cfg *Config) []byte {
	tb.Helper()
	type doc struct {
		Version    int                 `yaml:"version"`
		Name       string              `yaml:"name"`
		Release    string              `yaml:"release"`
		Platforms  []string            `yaml:"platforms"`
		Coder      []map[string]string `yaml:"coder,omitempty"`
		Terraform  map[string]string   `yaml:"terraform,omitempty"`
		Postgres   map[string]string   `yaml:"postgres,omitempty"`
		Providers  []map[string]any    `yaml:"providers,omitempty"`
		Images     []string            `yaml:"images,omitempty"`
		Templates  []string            `yaml:"templates,omitempty"`
		Certs      []string            `yaml:"certs,omitempty"`
		Registries map[string]string   `yaml:"registries,omitempty"`
	}
	d := doc{Version: ConfigVersion, Name: cfg.Name, Release: cfg.Release, Registries: cfg.Registries}
	for _, p := range cfg.Platforms {
		d.Platforms = append(d.Platforms, slashPlatform(p))
	}
	for _, c := range cfg.Coder {
		if c.Self {
			d.Coder = append(d.Coder, map[string]string{"binary": "self"})
		} else {
			d.Coder = append(d.Coder, map[string]string{"path": c.Path, "platform": slashPlatform(c.Platform)})
		}
	}
	if t := cfg.Terraform; t != nil {
		d.Terraform = map[string]string{"version": t.Version}
		if t.Path != "" {
			d.Terraform["path"] = t.Path
		}
	}
	if p := cfg.Postgres; p != nil {
		d.Postgres = map[string]string{}
		if p.Version != "" {
			d.Postgres["version"] = p.Version
		}
		if p.Path != "" {
			d.Postgres["path"] = p.Path
		} else {
			d.Postgres["repository_url"] = p.RepositoryURL
		}
	}
	for _, p := range cfg.Providers {
		if p.Path != "" {
			d.Providers = append(d.Providers, map[string]any{"path": p.Path})
		} else {
			d.Providers = append(d.Providers, map[string]any{"source": p.Source.String(), "versions": p.Versions})
		}
	}
	for _, i := range cfg.Images {
		d.Images = append(d.Images, i.Name)
	}
	for _, t := range cfg.Templates {
		d.Templates = append(d.Templates, t.Path)
	}
	for _, c := range cfg.Certs {
		d.Certs = append(d.Certs, c.Path)
	}
	b, err := yaml.Marshal(d)
	if err != nil {
		tb.Fatalf("encode the parsed config: %v", err)
	}
	return b
}

// comparableConfig is cfg without what depends on how the file was
// written: origins, images as written, empty lists and maps.
func comparableConfig(cfg *Config) Config {
	c := *cfg
	c.File, c.Dir = "", ""
	c.Coder = slices.Clone(c.Coder)
	for i := range c.Coder {
		c.Coder[i].Origin = Origin{}
	}
	if c.Terraform != nil {
		t := *c.Terraform
		t.Origin = Origin{}
		c.Terraform = &t
	}
	if c.Postgres != nil {
		p := *c.Postgres
		p.Origin = Origin{}
		c.Postgres = &p
	}
	c.Providers = slices.Clone(c.Providers)
	for i := range c.Providers {
		c.Providers[i].Origin = Origin{}
	}
	c.Images = slices.Clone(c.Images)
	for i := range c.Images {
		c.Images[i].Origin, c.Images[i].Ref = Origin{}, ""
	}
	c.Templates = slices.Clone(c.Templates)
	for i := range c.Templates {
		c.Templates[i].Origin = Origin{}
	}
	c.Certs = slices.Clone(c.Certs)
	for i := range c.Certs {
		c.Certs[i].Origin = Origin{}
	}
	if len(c.Coder) == 0 {
		c.Coder = nil
	}
	if len(c.Providers) == 0 {
		c.Providers = nil
	}
	if len(c.Images) == 0 {
		c.Images = nil
	}
	if len(c.Templates) == 0 {
		c.Templates = nil
	}
	if len(c.Certs) == 0 {
		c.Certs = nil
	}
	if len(c.Registries) == 0 {
		c.Registries = nil
	}
	return c
}

// FuzzParseConfig checks the bundle.yaml parser.
//
// Properties: no panic or hang (the input is capped at 64 KiB, aliases
// included); every refusal is a *ConfigError naming the file and a line;
// whatever is accepted meets the file's rules (supported platforms, coder
// binaries for each, absolute paths that exist); and the accepted config,
// written back as a canonical bundle.yaml, parses to the same config.
//
// Paths in the input are resolved and stat'ed, so inputs naming the
// kernel's pseudo file systems are skipped.
func FuzzParseConfig(f *testing.F) {
	plat := slashPlatform(hostPlatform())
	head := "version: 1\nname: acme\nrelease: \"1\"\nplatforms: [" + plat + "]\n"
	f.Add([]byte(exampleConfig(plat)))
	for _, s := range []string{
		head + "coder:\n  - {path: ./coder-host, platform: " + plat + "}\npostgres:\n  version: 16.9.0\n  repository_url: https://maven.corp/m2\n",
		head + "postgres: {path: ./pg}\nterraform: {version: 1.11.4, path: ./coder-host}\n",
		"version: 1\nname: a\nrelease: \"1\"\nplatforms: &p [linux/amd64]\nimages: [&i alpine:3.20]\ntemplates: [templates/docker]\n",
		// Broken.
		"",
		"version: 1\nname: [\n",
		"version: 1\n\tname: x\n",
		"- a\n",
		head + "name: other\n",
		head + "coder: {binary: self, path: ./coder-host}\n",
		head + "coder:\n  path: ./coder-host\n  platform: windows/amd64\n",
		"version: 1\nname: a\nrelease: \"1\"\nplatforms: [" + plat + ", windows/amd64]\ncoder: {binary: self}\n",
		head + "providers:\n  - {source: coder/coder, versions: [\"1.0.0\"]}\n  - {source: registry.terraform.io/coder/coder, versions: [\"2.0.0\"]}\n",
		head + "images:\n  - alpine:3.20\n  - docker.io/library/alpine:3.20\n",
		head + "templates: [./templates/empty]\n",
		head + "registries:\n  docker.io: https://a/\n  Docker.io: https://b/\n",
		head + "x: &a [*a]\n",
		"a: &a [1,2]\nb: &b [*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b]\nd: [*c,*c,*c,*c]\n",
	} {
		f.Add([]byte(s))
	}

	dir := configDir(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			t.Skip("input over the size cap")
		}
		for _, fs := range []string{"/proc", "/sys", "/dev"} {
			if bytes.Contains(data, []byte(fs)) {
				t.Skip("names a pseudo file system")
			}
		}
		cfg, err := ParseConfig(data, "bundle.yaml", dir)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != "bundle.yaml" || ce.Line < 1 {
				t.Fatalf("error %v (%T) is not a *ConfigError naming bundle.yaml and a line", err, err)
			}
			return
		}
		if len(cfg.Platforms) == 0 {
			t.Fatal("accepted a config without platforms")
		}
		for _, p := range cfg.Platforms {
			if !slices.Contains(SupportedPlatforms, slashPlatform(p)) {
				t.Fatalf("accepted platform %v", p)
			}
		}
		if len(cfg.Coder) > 0 {
			for _, p := range cfg.Platforms {
				if !slices.ContainsFunc(cfg.Coder, func(c CoderSource) bool { return c.Platform == p }) {
					t.Fatalf("accepted coder binaries that do not cover %v", p)
				}
			}
		}
		var paths []string
		for _, c := range cfg.Coder {
			paths = append(paths, c.Path)
		}
		for _, p := range cfg.Providers {
			paths = append(paths, p.Path)
		}
		for _, tp := range cfg.Templates {
			paths = append(paths, tp.Path)
		}
		for _, c := range cfg.Certs {
			paths = append(paths, c.Path)
		}
		for _, p := range paths {
			if p == "" {
				continue
			}
			if !filepath.IsAbs(p) {
				t.Fatalf("accepted path %q is not absolute", p)
			}
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("accepted path: %v", err)
			}
		}
		for _, i := range cfg.Images {
			if _, err := remoteRef(i.Name); err != nil {
				t.Fatalf("accepted image %q, which cannot be fetched: %v", i.Name, err)
			}
		}

		canon := canonicalConfig(t, cfg)
		again, err := ParseConfig(canon, "bundle.yaml", dir)
		if err != nil {
			t.Fatalf("the accepted config, written back, does not parse: %v\n%s", err, canon)
		}
		if a, b := comparableConfig(cfg), comparableConfig(again); !reflect.DeepEqual(a, b) {
			t.Fatalf("the accepted config changes when written back:\n%+v\nthen\n%+v\n%s", a, b, canon)
		}
		if !strings.HasPrefix(string(canon), "version: 1\n") {
			t.Fatalf("canonical form:\n%s", canon)
		}
	})
}
