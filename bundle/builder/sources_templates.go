package builder

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/go-version"

	"airgapcoder/bundle"
	"airgapcoder/internal/templateneeds"
	"airgapcoder/mirror"
)

// Templates are copied into templates/<name>/ once every provider and image
// is in, and checked against them:
//
//   - every provider the template requires (required_providers, and the
//     ones its resources imply, in the root module and in local modules) must
//     be in the bundle in a version that meets its constraints; the newest
//     such version is locked;
//   - every resource attribute named "image" whose value is a literal string
//     must name a bundled image (by tag, or by a digest the bundle holds);
//   - a registry module (HOST/NAMESPACE/NAME/SYSTEM) must be bundled
//     (modules: in bundle.yaml) in a version that meets the call's
//     constraint; a module from anywhere else but the template folder is an
//     error: an offline terraform cannot fetch it.
//
// The copy gets a .terraform.lock.hcl that pins each provider with the h1:
// and zh: hashes of every bundled platform (any lock file the folder had is
// replaced), so terraform init offline installs exactly the bundled zips.
// .terraform/ folders and state files are not copied.

func (b *builder) stageTemplates(ctx context.Context) error {
	for _, src := range b.cfg.Templates {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := b.stageTemplate(src); err != nil {
			return fmt.Errorf("%s: template %s: %w", src.Origin, src.Name, err)
		}
	}
	return nil
}

func (b *builder) stageTemplate(src TemplateSource) error {
	needs, err := templateneeds.Inspect(src.Path, src.Path)
	if err != nil {
		return err
	}
	// Everything the bundle lacks, at once, with the bundle.yaml lines.
	lacks, err := needs.Lacks(context.Background(), builderCatalog{b})
	if err != nil {
		return err
	}
	if len(lacks) > 0 {
		return &templateneeds.MissingError{Where: "the bundle", Building: true, Lacks: lacks}
	}
	tmpl := bundle.Template{Name: src.Name, Path: bundle.TemplatePath(src.Name)}
	locks := map[string]lockedProvider{}
	for _, p := range needs.Providers {
		v, err := b.pickProviderVersion(p.Address, p.Constraints)
		if err != nil {
			return fmt.Errorf("%s: %w", p.Pos, err)
		}
		var hashes []string
		for _, hs := range b.providerHashes[p.Address][v] {
			hashes = append(hashes, hs...)
		}
		slices.Sort(hashes)
		locks[p.Address] = lockedProvider{version: v, constraints: strings.Join(p.Constraints, ", "), hashes: slices.Compact(hashes)}
		tmpl.Providers = append(tmpl.Providers, p.Address+" "+v)
	}
	for _, img := range needs.Images {
		name, err := b.bundledImage(img.Ref)
		if err != nil {
			return fmt.Errorf("%s: %w", img.Pos, err)
		}
		if !slices.Contains(tmpl.Images, name) {
			tmpl.Images = append(tmpl.Images, name)
		}
	}
	if err := b.copyTemplate(src.Path, tmpl.Path); err != nil {
		return err
	}
	if err := b.writePayload(tmpl.Path+"/.terraform.lock.hcl", lockFile(locks)); err != nil {
		return err
	}
	b.mu.Lock()
	b.comp.Templates = append(b.comp.Templates, tmpl)
	b.mu.Unlock()
	b.progress.logf("template %s (%d providers, %d images checked)", src.Name, len(tmpl.Providers), len(tmpl.Images))
	return nil
}

// builderCatalog is what the bundle being built holds, for
// templateneeds.
type builderCatalog struct{ b *builder }

func (c builderCatalog) ProviderVersions(_ context.Context, addr string) ([]string, error) {
	return mapKeys(c.b.providerHashes[addr]), nil
}

func (c builderCatalog) ModuleVersions(_ context.Context, source string) ([]string, error) {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	var have []string
	for _, m := range c.b.comp.Modules {
		if m.Source == source {
			have = append(have, m.Version)
		}
	}
	return have, nil
}

// pickProviderVersion returns the newest bundled version of addr that
// meets every constraint.
func (b *builder) pickProviderVersion(addr string, constraints []string) (string, error) {
	var cs version.Constraints
	for _, c := range constraints {
		parsed, err := version.NewConstraint(c)
		if err != nil {
			return "", fmt.Errorf("provider %s: version constraint %q: %w", addr, c, err)
		}
		cs = append(cs, parsed...)
	}
	byVersion := b.providerHashes[addr]
	if len(byVersion) == 0 {
		return "", fmt.Errorf("needs provider %s, which the bundle does not hold (add it to providers:)", addr)
	}
	versions := mapKeys(byVersion)
	slices.SortFunc(versions, func(x, y string) int { return compareSemver(y, x) })
	for _, v := range versions {
		pv, err := version.NewVersion(v)
		if err == nil && cs.Check(pv) {
			return v, nil
		}
	}
	return "", fmt.Errorf("needs provider %s %s, but the bundle holds only %s", addr, strings.Join(constraints, ", "), strings.Join(versions, ", "))
}

// bundledImage returns the full name of the bundled image that ref (as a
// template writes it) names.
func (b *builder) bundledImage(ref string) (string, error) {
	want, err := mirror.ParseImageRef(ref)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	for _, img := range b.cfg.Images {
		have, err := mirror.ParseImageRef(img.Name)
		if err != nil || have.Host != want.Host || have.Path != want.Path {
			continue
		}
		switch {
		case want.Digest != "" && slices.Contains(b.imageDigests[img.Name], want.Digest):
			return img.Name, nil
		case want.Digest == "" && want.Tag == have.Tag:
			return img.Name, nil
		}
	}
	return "", fmt.Errorf("image %q is not in the bundle (add %s to images:)", ref, want)
}

// copyTemplate copies a template folder into the payload (eachSourceFile).
func (b *builder) copyTemplate(dir, rel string) error {
	return eachSourceFile(dir, func(abs, r string, mode fs.FileMode) error {
		_, err := b.stageFile(abs, rel+"/"+r, mode)
		return err
	})
}

// eachSourceFile calls fn for every regular file of a template or module
// folder dir, with its slash path relative to dir and its mode (0644, or
// 0755 when executable): .terraform/ and .git/, lock and state files are
// left out; symbolic links and special files are an error.
func eachSourceFile(dir string, fn func(abs, rel string, mode fs.FileMode) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(dir, p)
		name := d.Name()
		switch {
		case r == ".":
			return nil
		case d.IsDir() && (name == ".terraform" || name == ".git"):
			return filepath.SkipDir
		case d.IsDir():
			return nil
		case name == ".terraform.lock.hcl" || strings.HasPrefix(name, "terraform.tfstate") || name == ".terraform.tfstate.lock.info":
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link; bundle the file it points to instead", r)
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", r)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		return fn(p, filepath.ToSlash(r), mode)
	})
}

// lockedProvider is one provider block of a lock file.
type lockedProvider struct {
	version, constraints string
	hashes               []string
}

// lockFile writes .terraform.lock.hcl as terraform init does: providers
// sorted by address, hashes sorted.
func lockFile(locks map[string]lockedProvider) []byte {
	var b strings.Builder
	b.WriteString("# This file is maintained automatically by \"terraform init\".\n")
	b.WriteString("# Manual edits may be lost in future updates.\n")
	for _, addr := range mapKeys(locks) {
		l := locks[addr]
		fmt.Fprintf(&b, "\nprovider %q {\n", addr)
		if l.constraints != "" {
			fmt.Fprintf(&b, "  version     = %q\n", l.version)
			fmt.Fprintf(&b, "  constraints = %q\n", l.constraints)
		} else {
			fmt.Fprintf(&b, "  version = %q\n", l.version)
		}
		b.WriteString("  hashes = [\n")
		for _, h := range l.hashes {
			fmt.Fprintf(&b, "    %q,\n", h)
		}
		b.WriteString("  ]\n}\n")
	}
	return []byte(b.String())
}
