// Package templateneeds reads what a Terraform template needs from outside
// its folder, without running terraform: the providers it requires (in
// required_providers and implied by its resources), the registry modules it
// calls, module sources that no offline mirror can serve (git, http
// archives, buckets), and the container images its resources name as
// literals. It follows local module calls (./, ../) inside the template
// folder and refuses one that leaves it.
//
// Given a Catalog of what a mirror holds, Lacks says what the template
// needs that the mirror does not, all of it at once, and MissingError words
// that with the bundle.yaml lines that would fill it. `bundle build` (the
// template preflight), the provisioners (before terraform runs an import)
// and `coder templates push` all check a template through it.
//
// It reads files only: it must not run terraform or reach the network.
package templateneeds

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/terraform-config-inspect/tfconfig"
	"github.com/zclconf/go-cty/cty"

	"airgapcoder/mirror"
)

// BuiltinTerraform is the provider of terraform_data and friends; it comes
// with terraform.
const BuiltinTerraform = "terraform.io/builtin/terraform"

// Provider is a provider a template requires.
type Provider struct {
	// Address is HOST/NAMESPACE/TYPE, lower case.
	Address string
	// Constraints are every version constraint put on it, in file order.
	Constraints []string
	// Pos says where it is first used or required (file:line).
	Pos string
}

// Module is a registry module a template calls.
type Module struct {
	// Source is HOST/NAMESPACE/NAME/SYSTEM.
	Source string
	// Version is the call's version constraint ("" for any).
	Version string
	Pos     string
}

// Remote is a module call from a source that is neither in the template
// folder nor a module registry: terraform would fetch it from the network.
type Remote struct {
	Name, Source, Pos string
}

// Image is a literal image reference in a resource.
type Image struct {
	Ref, Pos string
}

// Needs is what a template needs from outside its folder.
type Needs struct {
	Providers []Provider // sorted by address
	Modules   []Module   // in the order of the files
	Remote    []Remote
	Images    []Image
}

// Inspect reads the template (or module) whose root module is dir; root is
// the folder no local module call may leave (dir itself for a template).
func Inspect(root, dir string) (Needs, error) {
	in := inspection{root: root, providers: map[string]*Provider{}}
	if err := in.module(dir, 0); err != nil {
		return Needs{}, err
	}
	n := in.needs
	for _, addr := range slices.Sorted(maps.Keys(in.providers)) {
		n.Providers = append(n.Providers, *in.providers[addr])
	}
	return n, nil
}

type inspection struct {
	root      string
	providers map[string]*Provider
	needs     Needs
}

func (in *inspection) rel(p string) string {
	r, err := filepath.Rel(in.root, p)
	if err != nil {
		return p
	}
	return r
}

func (in *inspection) module(dir string, depth int) error {
	if depth > 16 {
		return fmt.Errorf("%s: modules nest too deep", dir)
	}
	mod, diags := tfconfig.LoadModule(dir)
	if diags.HasErrors() {
		return fmt.Errorf("%s: %w", in.rel(dir), diags.Err())
	}
	// tfconfig lists the providers resources imply (hashicorp/<type>)
	// among the required ones, with no source.
	for _, name := range slices.Sorted(maps.Keys(mod.RequiredProviders)) {
		req := mod.RequiredProviders[name]
		source := req.Source
		if source == "" {
			if name == "terraform" {
				continue // terraform_data: built into terraform
			}
			source = mirror.DefaultProviderHost + "/hashicorp/" + name
		}
		if strings.EqualFold(source, BuiltinTerraform) {
			continue
		}
		addr, err := mirror.ParseProviderAddress(source)
		if err != nil {
			return fmt.Errorf("%s: provider %q: %w", in.rel(dir), name, err)
		}
		in.addProvider(addr.String(), req.VersionConstraints, providerUse(mod, name, in.rel))
	}
	for _, name := range slices.Sorted(maps.Keys(mod.ModuleCalls)) {
		call := mod.ModuleCalls[name]
		pos := fmt.Sprintf("%s:%d: module %q", in.rel(call.Pos.Filename), call.Pos.Line, name)
		if addr, ok := RegistryModuleSource(call.Source); ok {
			in.needs.Modules = append(in.needs.Modules, Module{Source: addr, Version: call.Version, Pos: pos})
			continue
		}
		if !strings.HasPrefix(call.Source, "./") && !strings.HasPrefix(call.Source, "../") {
			in.needs.Remote = append(in.needs.Remote, Remote{Name: name, Source: call.Source, Pos: pos})
			continue
		}
		sub := filepath.Join(dir, call.Source)
		if r, err := filepath.Rel(in.root, sub); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return fmt.Errorf("%s:%d: module %q at %q is outside the template folder, so it would not be bundled", in.rel(call.Pos.Filename), call.Pos.Line, name, call.Source)
		}
		if err := in.module(sub, depth+1); err != nil {
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
			img.Pos = in.rel(f) + img.Pos
			in.needs.Images = append(in.needs.Images, img)
		}
	}
	return nil
}

func (in *inspection) addProvider(addr string, constraints []string, pos string) {
	p, ok := in.providers[addr]
	if !ok {
		p = &Provider{Address: addr, Pos: pos}
		in.providers[addr] = p
	}
	p.Constraints = append(p.Constraints, constraints...)
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

// RegistryModuleSource reports whether a module call's source is a module
// registry address (as terraform reads it: [HOST/]NAMESPACE/NAME/SYSTEM,
// not a path, URL, forced getter or GitHub/Bitbucket shorthand), and
// returns it with its host.
func RegistryModuleSource(s string) (string, bool) {
	if strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") || strings.HasPrefix(s, "/") ||
		strings.Contains(s, "::") || strings.Contains(s, "://") || strings.Contains(s, "//") || strings.ContainsAny(s, "?@") {
		return "", false
	}
	lower := strings.ToLower(s)
	if strings.HasPrefix(lower, "github.com/") || strings.HasPrefix(lower, "bitbucket.org/") {
		return "", false
	}
	addr, err := mirror.ParseModuleSource(s)
	if err != nil {
		return "", false
	}
	return addr, true
}

// literalImages returns the literal string values of attributes named
// "image" anywhere inside the resource blocks of a .tf file.
func literalImages(path string) ([]Image, error) {
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
	var out []Image
	var walk func(*hclsyntax.Body)
	walk = func(body *hclsyntax.Body) {
		for _, name := range slices.Sorted(maps.Keys(body.Attributes)) {
			attr := body.Attributes[name]
			if name != "image" {
				continue
			}
			if s, ok := literalString(attr.Expr); ok {
				out = append(out, Image{Ref: s, Pos: fmt.Sprintf(":%d", attr.SrcRange.Start.Line)})
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
	slices.SortStableFunc(out, func(a, b Image) int { return strings.Compare(a.Pos, b.Pos) })
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

// Catalog says which versions a mirror holds (none: an empty list).
type Catalog interface {
	ProviderVersions(ctx context.Context, address string) ([]string, error)
	ModuleVersions(ctx context.Context, source string) ([]string, error)
}

// Lack is one thing a template needs that a mirror does not hold.
type Lack struct {
	// Kind is "provider", "module" or "remote module".
	Kind string
	// What is the provider address, the module source, or the remote
	// module's source as written.
	What string
	// Constraint is the version constraint the mirror's versions miss.
	Constraint string
	// Have are the versions the mirror holds, none of which meets it.
	Have []string
	Pos  string
}

// Lacks checks n against c and returns everything c lacks.
func (n Needs) Lacks(ctx context.Context, c Catalog) ([]Lack, error) {
	var out []Lack
	for _, p := range n.Providers {
		have, err := c.ProviderVersions(ctx, p.Address)
		if err != nil {
			return nil, fmt.Errorf("provider %s: %w", p.Address, err)
		}
		constraint := strings.Join(p.Constraints, ", ")
		if ok, err := meets(have, constraint); err != nil {
			return nil, fmt.Errorf("%s: provider %s: %w", p.Pos, p.Address, err)
		} else if !ok {
			out = append(out, Lack{Kind: "provider", What: p.Address, Constraint: constraint, Have: have, Pos: p.Pos})
		}
	}
	seen := map[string]bool{}
	for _, m := range n.Modules {
		if seen[m.Source+"\x00"+m.Version] {
			continue
		}
		seen[m.Source+"\x00"+m.Version] = true
		have, err := c.ModuleVersions(ctx, m.Source)
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", m.Source, err)
		}
		if ok, err := meets(have, m.Version); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Pos, err)
		} else if !ok {
			out = append(out, Lack{Kind: "module", What: m.Source, Constraint: m.Version, Have: have, Pos: m.Pos})
		}
	}
	for _, r := range n.Remote {
		out = append(out, Lack{Kind: "remote module", What: r.Source, Pos: r.Pos})
	}
	return out, nil
}

// meets reports whether one of have meets constraint ("" for any).
func meets(have []string, constraint string) (bool, error) {
	var cs version.Constraints
	if constraint != "" {
		var err error
		if cs, err = version.NewConstraint(constraint); err != nil {
			return false, fmt.Errorf("version constraint %q: %w", constraint, err)
		}
	}
	for _, h := range have {
		v, err := version.NewVersion(h)
		if err == nil && (cs == nil || cs.Check(v)) {
			return true, nil
		}
	}
	return false, nil
}

// MissingError is the refusal of a template that needs what the mirror
// lacks: every lack, and the bundle.yaml lines that would bring it.
type MissingError struct {
	// Where names the mirror ("this appliance's mirror", "the bundle").
	Where string
	// Building says the check is bundle build's own: the lines go into the
	// bundle.yaml at hand, with no delta bundle to build afterwards.
	Building bool
	Lacks    []Lack
}

func (e *MissingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the template needs %d %s that %s does not hold, and terraform must not fetch them from the network:\n", len(e.Lacks), plural(len(e.Lacks), "thing", "things"), e.Where)
	for _, l := range e.Lacks {
		fmt.Fprintf(&b, "  - %s %s", l.Kind, l.What)
		if l.Constraint != "" {
			fmt.Fprintf(&b, " %s", l.Constraint)
		}
		if len(l.Have) > 0 {
			fmt.Fprintf(&b, " (it holds only %s)", strings.Join(l.Have, ", "))
		}
		fmt.Fprintf(&b, " (%s)\n", l.Pos)
	}
	var providers, modules, remote []Lack
	for _, l := range e.Lacks {
		switch l.Kind {
		case "provider":
			providers = append(providers, l)
		case "module":
			modules = append(modules, l)
		default:
			remote = append(remote, l)
		}
	}
	if len(providers)+len(modules) > 0 {
		if e.Building {
			b.WriteString("Add to bundle.yaml:\n")
		} else {
			b.WriteString("Add to bundle.yaml on the connected side:\n")
		}
		if len(providers) > 0 {
			b.WriteString("providers:\n")
			for _, l := range providers {
				fmt.Fprintf(&b, "  - source: %s\n    versions: [%q]", l.What, exactVersion(l.Constraint))
				if exactVersion(l.Constraint) == "VERSION" {
					if l.Constraint != "" {
						fmt.Fprintf(&b, "    # an exact version that meets %s", l.Constraint)
					} else {
						b.WriteString("    # an exact version, such as the latest")
					}
				}
				b.WriteString("\n")
			}
		}
		if len(modules) > 0 {
			b.WriteString("modules:\n")
			for _, l := range modules {
				fmt.Fprintf(&b, "  - source: %s\n", l.What)
				if l.Constraint != "" {
					fmt.Fprintf(&b, "    version: %q\n", l.Constraint)
				}
			}
		}
		if !e.Building {
			b.WriteString("then build a delta bundle against this appliance (coder appliance inventory --dir DIR -o inventory.json here; " +
				"coder bundle build -f bundle.yaml --against inventory.json there) and install it with coder appliance upgrade.\n")
		}
	}
	if len(remote) > 0 {
		b.WriteString("A module from git, an http archive or a bucket cannot come offline: copy it into the template folder and call it with a ./ path, " +
			"or publish it to a module registry and bundle it (modules: in bundle.yaml).\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// exactVersion is the version a constraint pins ("3.0.2", "= 3.0.2"), or
// "VERSION" when it pins none.
func exactVersion(constraint string) string {
	c := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(constraint), "="))
	if v, err := version.NewSemver(c); err == nil && !strings.ContainsAny(c, ",<>~! ") {
		return v.Original()
	}
	return "VERSION"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
