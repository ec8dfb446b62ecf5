package provisionerd

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"airgapcoder/codersdk"
)

// What the daemon reads from a template's source rather than from
// terraform: the retired provider, coder_workspace_tags expressions, and
// the coder_parameter blocks an import must give placeholder values. Only
// native-syntax .tf files are read (not .tf.json); a file that does not
// parse is skipped here, and terraform reports it.

// retiredProvider is the source address of the project's own provider,
// replaced by the official coder/coder.
const retiredProvider = "coder.internal/appliance/coder"

// tfFile is a parsed .tf file.
type tfFile struct {
	path string // relative to the template folder
	src  []byte
	body *hclsyntax.Body
}

// parseDir parses the .tf files directly in dir, in name order.
func parseDir(root, dir string) []tfFile {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var files []tfFile
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".tf") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		src, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		f, diags := hclsyntax.ParseConfig(src, p, hcl.InitialPos)
		if diags.HasErrors() {
			continue
		}
		rel, _ := filepath.Rel(root, p)
		files = append(files, tfFile{path: rel, src: src, body: f.Body.(*hclsyntax.Body)})
	}
	return files
}

// checkRetiredProvider fails with one clear error when any .tf file of the
// template (child module folders included) requires the retired provider.
func checkRetiredProvider(root string) error {
	var found []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == ".terraform" {
			return filepath.SkipDir
		}
		for _, f := range parseDir(root, p) {
			for _, tb := range f.body.Blocks {
				if tb.Type != "terraform" {
					continue
				}
				for _, rp := range tb.Body.Blocks {
					if rp.Type != "required_providers" {
						continue
					}
					for _, name := range slices.Sorted(maps.Keys(rp.Body.Attributes)) {
						if pos, ok := retiredSource(rp.Body.Attributes[name].Expr); ok {
							found = append(found, fmt.Sprintf("%s:%d", f.path, pos.Line))
						}
					}
				}
			}
		}
		return nil
	})
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("this template uses the retired provider %s (%s): templates now use the official Coder provider; "+
		"in required_providers write coder = { source = \"coder/coder\" } instead, see docs/templates.md",
		retiredProvider, strings.Join(found, ", "))
}

// retiredSource reports whether a required_providers entry is
// { source = "<retired provider>" } and where its source is.
func retiredSource(expr hclsyntax.Expression) (hcl.Pos, bool) {
	obj, ok := expr.(*hclsyntax.ObjectConsExpr)
	if !ok {
		return hcl.Pos{}, false
	}
	for _, item := range obj.Items {
		key, diags := item.KeyExpr.Value(nil)
		if diags.HasErrors() || !key.Type().Equals(cty.String) || key.AsString() != "source" {
			continue
		}
		v, diags := item.ValueExpr.Value(nil)
		if diags.HasErrors() || !v.Type().Equals(cty.String) || v.IsNull() {
			continue
		}
		if strings.EqualFold(strings.TrimPrefix(v.AsString(), "registry.terraform.io/"), retiredProvider) {
			return item.ValueExpr.Range().Start, true
		}
	}
	return hcl.Pos{}, false
}

// workspaceTags reads the entries of the root module's
// data "coder_workspace_tags" blocks. params maps the address
// data.coder_parameter.<label> to the parameter's name; variables are the
// template's variable names. An expression may refer only to those: coderd
// evaluates them with a build's parameter values and the variables.
func workspaceTags(root string, params map[string]string, variables map[string]bool) ([]codersdk.WorkspaceTagExpression, error) {
	var tags []codersdk.WorkspaceTagExpression
	for _, f := range parseDir(root, root) {
		for _, b := range f.body.Blocks {
			if b.Type != "data" || len(b.Labels) != 2 || b.Labels[0] != "coder_workspace_tags" {
				continue
			}
			where := fmt.Sprintf("data.coder_workspace_tags.%s (%s:%d)", b.Labels[1], f.path, b.DefRange().Start.Line)
			attr, ok := b.Body.Attributes["tags"]
			if !ok {
				continue
			}
			obj, ok := attr.Expr.(*hclsyntax.ObjectConsExpr)
			if !ok {
				return nil, fmt.Errorf("%s: tags must be an object written out as { key = value, ... }", where)
			}
			for _, item := range obj.Items {
				tag := codersdk.WorkspaceTagExpression{
					Key:   string(item.KeyExpr.Range().SliceBytes(f.src)),
					Value: string(item.ValueExpr.Range().SliceBytes(f.src)),
				}
				refs, err := tagReferences(item, params, variables)
				if err != nil {
					return nil, fmt.Errorf("%s: tag %s: %w", where, tag.Key, err)
				}
				tag.References = refs
				tags = append(tags, tag)
			}
		}
	}
	return tags, nil
}

// tagReferences checks what a tag's key and value refer to and maps each
// data.coder_parameter.<label> they refer to onto the parameter's name
// (only those: coderd needs a build value for every parameter named).
func tagReferences(item hclsyntax.ObjectConsItem, params map[string]string, variables map[string]bool) (map[string]string, error) {
	refs := map[string]string{}
	traversals := append(item.KeyExpr.Variables(), item.ValueExpr.Variables()...)
	for _, t := range traversals {
		root := t.RootName()
		switch {
		case root == "var" && len(t) > 1:
			name := attrName(t[1])
			if !variables[name] {
				return nil, fmt.Errorf("var.%s is not a variable of this template", name)
			}
		case root == "data" && len(t) > 2 && attrName(t[1]) == "coder_parameter":
			addr := "data.coder_parameter." + attrName(t[2])
			name, ok := params[addr]
			if !ok {
				return nil, fmt.Errorf("%s is not a single coder_parameter of the root module (one with count or for_each cannot be used in workspace tags)", addr)
			}
			refs[addr] = name
		default:
			return nil, fmt.Errorf("it refers to %s: a workspace tag may refer only to var.NAME and data.coder_parameter.NAME.value",
				traversalText(t))
		}
	}
	if len(refs) == 0 {
		return nil, nil
	}
	return refs, nil
}

func attrName(s hcl.Traverser) string {
	switch t := s.(type) {
	case hcl.TraverseAttr:
		return t.Name
	case hcl.TraverseRoot:
		return t.Name
	}
	return ""
}

func traversalText(t hcl.Traversal) string {
	parts := make([]string, 0, len(t))
	for _, s := range t {
		if name := attrName(s); name != "" {
			parts = append(parts, name)
		}
	}
	return strings.Join(parts, ".")
}
