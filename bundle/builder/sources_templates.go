package builder

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/terraform-config-inspect/tfconfig"
	"github.com/zclconf/go-cty/cty"

	"airgapcoder/bundle"
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

// builtinTerraform is the provider of terraform_data and friends; it comes
// with terraform.
const builtinTerraform = "terraform.io/builtin/terraform"

// templateNeeds is what a template requires.
type templateNeeds struct {
	providers   map[string][]string // address → version constraints
	providerPos map[string]string   // address → where it is required
	images      []templateImage
	modules     []moduleCall // registry modules called
}

type templateImage struct {
	ref string
	pos string // file:line
}

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
	needs := &templateNeeds{providers: map[string][]string{}, providerPos: map[string]string{}}
	if err := inspectModule(src.Path, src.Path, needs, 0); err != nil {
		return err
	}
	if err := b.checkTemplateModules(needs); err != nil {
		return err
	}
	tmpl := bundle.Template{Name: src.Name, Path: bundle.TemplatePath(src.Name)}
	locks := map[string]lockedProvider{}
	for _, addr := range mapKeys(needs.providers) {
		constraints := needs.providers[addr]
		v, err := b.pickProviderVersion(addr, constraints)
		if err != nil {
			return fmt.Errorf("%s: %w", needs.providerPos[addr], err)
		}
		var hashes []string
		for _, hs := range b.providerHashes[addr][v] {
			hashes = append(hashes, hs...)
		}
		slices.Sort(hashes)
		locks[addr] = lockedProvider{version: v, constraints: strings.Join(constraints, ", "), hashes: slices.Compact(hashes)}
		tmpl.Providers = append(tmpl.Providers, addr+" "+v)
	}
	for _, img := range needs.images {
		name, err := b.bundledImage(img.ref)
		if err != nil {
			return fmt.Errorf("%s: %w", img.pos, err)
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

// inspectModule collects what the module in dir needs, following local
// module calls (inside root only).
func inspectModule(root, dir string, needs *templateNeeds, depth int) error {
	if depth > 16 {
		return fmt.Errorf("%s: modules nest too deep", dir)
	}
	rel := func(p string) string {
		r, err := filepath.Rel(root, p)
		if err != nil {
			return p
		}
		return r
	}
	mod, diags := tfconfig.LoadModule(dir)
	if diags.HasErrors() {
		return fmt.Errorf("%s: %w", rel(dir), diags.Err())
	}
	for name, req := range mod.RequiredProviders {
		source := req.Source
		if source == "" {
			if name == "terraform" {
				continue // terraform_data: built into terraform
			}
			source = mirror.DefaultProviderHost + "/hashicorp/" + name
		}
		if strings.EqualFold(source, builtinTerraform) {
			continue
		}
		addr, err := mirror.ParseProviderAddress(source)
		if err != nil {
			return fmt.Errorf("%s: provider %q: %w", rel(dir), name, err)
		}
		key := addr.String()
		needs.providers[key] = append(needs.providers[key], req.VersionConstraints...)
		if _, ok := needs.providerPos[key]; !ok {
			needs.providerPos[key] = providerUse(mod, name, rel)
		}
	}
	for _, name := range mapKeys(mod.ModuleCalls) {
		call := mod.ModuleCalls[name]
		if addr, ok := registryModuleSource(call.Source); ok {
			needs.modules = append(needs.modules, moduleCall{source: addr, version: call.Version,
				pos: fmt.Sprintf("%s:%d: module %q", rel(call.Pos.Filename), call.Pos.Line, name)})
			continue
		}
		if !strings.HasPrefix(call.Source, "./") && !strings.HasPrefix(call.Source, "../") {
			return fmt.Errorf("%s:%d: module %q comes from %q, which terraform cannot fetch offline; copy it into the folder and use a ./ path, or call it from a module registry and bundle it (modules: in bundle.yaml)", rel(call.Pos.Filename), call.Pos.Line, name, call.Source)
		}
		sub := filepath.Join(dir, call.Source)
		if r, err := filepath.Rel(root, sub); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return fmt.Errorf("%s:%d: module %q at %q is outside the template folder, so it would not be bundled", rel(call.Pos.Filename), call.Pos.Line, name, call.Source)
		}
		if err := inspectModule(root, sub, needs, depth+1); err != nil {
			return err
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.tf"))
	slices.Sort(files)
	for _, f := range files {
		imgs, err := literalImages(f)
		if err != nil {
			return err
		}
		for _, img := range imgs {
			img.pos = rel(f) + img.pos
			needs.images = append(needs.images, img)
		}
	}
	return nil
}

// providerUse says where a module uses provider name: the first resource
// of it, or its required_providers entry.
func providerUse(mod *tfconfig.Module, name string, rel func(string) string) string {
	var uses []string
	for _, rs := range []map[string]*tfconfig.Resource{mod.ManagedResources, mod.DataResources} {
		for _, r := range rs {
			if r.Provider.Name == name {
				uses = append(uses, fmt.Sprintf("%s:%d", rel(r.Pos.Filename), r.Pos.Line))
			}
		}
	}
	if len(uses) == 0 {
		if r := rel(mod.Path); r != "." {
			return r + ": required_providers." + name
		}
		return "required_providers." + name
	}
	slices.Sort(uses)
	return uses[0]
}

// literalImages returns the literal string values of attributes named
// "image" anywhere inside the resource blocks of a .tf file.
func literalImages(path string) ([]templateImage, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return nil, nil
	}
	var out []templateImage
	var walk func(*hclsyntax.Body)
	walk = func(body *hclsyntax.Body) {
		for _, name := range mapKeys(body.Attributes) {
			attr := body.Attributes[name]
			if name != "image" {
				continue
			}
			if s, ok := literalString(attr.Expr); ok {
				out = append(out, templateImage{ref: s, pos: fmt.Sprintf(":%d", attr.SrcRange.Start.Line)})
			}
		}
		for _, blk := range body.Blocks {
			walk(blk.Body)
		}
	}
	for _, blk := range body.Blocks {
		if blk.Type == "resource" {
			walk(blk.Body)
		}
	}
	slices.SortStableFunc(out, func(a, b templateImage) int { return strings.Compare(a.pos, b.pos) })
	return out, nil
}

// literalString returns the value of an expression that is a plain string
// ("alpine:3.20", without interpolation).
func literalString(e hclsyntax.Expression) (string, bool) {
	switch e := e.(type) {
	case *hclsyntax.TemplateExpr:
		if !e.IsStringLiteral() {
			return "", false
		}
		v, diags := e.Value(nil)
		if diags.HasErrors() || v.Type() != cty.String || !v.IsKnown() || v.IsNull() {
			return "", false
		}
		return v.AsString(), true
	case *hclsyntax.LiteralValueExpr:
		if e.Val.Type() == cty.String && e.Val.IsKnown() && !e.Val.IsNull() {
			return e.Val.AsString(), true
		}
	}
	return "", false
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
