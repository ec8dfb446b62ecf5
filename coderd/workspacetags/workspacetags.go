// Package workspacetags evaluates a template's `data "coder_workspace_tags"`
// entries for one workspace build: the provisioner tags that build's job
// carries, so that it runs on a daemon that has them.
//
// The provisioner reports each entry as HCL source text (key and value) with
// the coder_parameter blocks it refers to (codersdk.WorkspaceTagExpression).
// Evaluate parses each with hclsyntax and evaluates it in a context that
// holds exactly:
//
//   - data.coder_parameter.<label>.value: the build's value of the parameter
//     that References names for "data.coder_parameter.<label>" (a string, as
//     the provider's value attribute is);
//   - var.<name>: the template version's variable values (numbers, bools
//     and JSON lists or maps typed as the variable declares, else strings);
//   - a few pure string functions of Terraform's (see Functions).
//
// Keys and values must evaluate to known strings; numbers and bools are
// converted. Anything else (a reference to something not in the context, an
// unsupported function, a null, list or object) is an *Error naming the tag.
//
// The package owns only this evaluation: it does not merge the result with
// the version's own tags or validate tag syntax (coderd does both), and
// knows nothing of HTTP or the database.
package workspacetags

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"airgapcoder/codersdk"
)

// Error is a tag that could not be evaluated.
type Error struct {
	// Tag is the tag's key (its source text when the key itself failed).
	Tag    string
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("workspace tag %s: %s", e.Tag, e.Detail)
}

// Variable is a template variable's value and its declared Terraform type
// ("string", "number", "bool", "list(string)", …; "" means string).
type Variable struct {
	Value string
	Type  string
}

// Input is what a build's tags are evaluated against.
type Input struct {
	// Parameters are the build's parameter values by parameter name.
	Parameters map[string]string
	// Variables are the template version's variables by name.
	Variables map[string]Variable
}

// Functions are the functions a tag expression may call: pure string and
// collection helpers of Terraform's, nothing that reads files, the clock or
// the environment.
func Functions() map[string]function.Function {
	return map[string]function.Function{
		"lower":      stdlib.LowerFunc,
		"upper":      stdlib.UpperFunc,
		"title":      stdlib.TitleFunc,
		"trimspace":  stdlib.TrimSpaceFunc,
		"trim":       stdlib.TrimFunc,
		"trimprefix": stdlib.TrimPrefixFunc,
		"trimsuffix": stdlib.TrimSuffixFunc,
		"replace":    stdlib.ReplaceFunc,
		"substr":     stdlib.SubstrFunc,
		"format":     stdlib.FormatFunc,
		"join":       stdlib.JoinFunc,
		"split":      stdlib.SplitFunc,
		"coalesce":   stdlib.CoalesceFunc,
		"concat":     stdlib.ConcatFunc,
		"contains":   stdlib.ContainsFunc,
		"element":    stdlib.ElementFunc,
		"length":     stdlib.LengthFunc,
		"lookup":     stdlib.LookupFunc,
		"jsondecode": stdlib.JSONDecodeFunc,
		"jsonencode": stdlib.JSONEncodeFunc,
		"tostring":   stdlib.MakeToFunc(cty.String),
		"tonumber":   stdlib.MakeToFunc(cty.Number),
		"tobool":     stdlib.MakeToFunc(cty.Bool),
	}
}

// Evaluate evaluates every entry and returns the tags. Two entries with the
// same key are an error.
func Evaluate(exprs []codersdk.WorkspaceTagExpression, in Input) (map[string]string, error) {
	vars := variables(in.Variables)
	out := map[string]string{}
	for _, e := range exprs {
		ctx, err := evalContext(e.References, in.Parameters, vars)
		if err != nil {
			return nil, &Error{Tag: e.Key, Detail: err.Error()}
		}
		key, err := evalKey(e.Key, ctx)
		if err != nil {
			return nil, &Error{Tag: e.Key, Detail: "key: " + err.Error()}
		}
		value, err := evalString(e.Value, ctx)
		if err != nil {
			return nil, &Error{Tag: key, Detail: err.Error()}
		}
		if _, dup := out[key]; dup {
			return nil, &Error{Tag: key, Detail: "the template sets this tag more than once"}
		}
		out[key] = value
	}
	return out, nil
}

// Parse checks that every entry's key and value parse as HCL expressions,
// so that a template whose workspace tags cannot work fails at import
// rather than at its first build.
func Parse(exprs []codersdk.WorkspaceTagExpression) error {
	for _, e := range exprs {
		for _, src := range []string{e.Key, e.Value} {
			if _, diags := hclsyntax.ParseExpression([]byte(src), "workspace_tags.tf", hcl.InitialPos); diags.HasErrors() {
				return &Error{Tag: e.Key, Detail: fmt.Sprintf("parse %q: %s", src, diagText(diags))}
			}
		}
	}
	return nil
}

// variables turns the template's variables into the var object.
func variables(in map[string]Variable) cty.Value {
	vals := map[string]cty.Value{}
	for name, v := range in {
		vals[name] = variableValue(v)
	}
	return cty.ObjectVal(vals)
}

// variableValue types a variable's value as declared; a value that does not
// parse as its type stays a string (terraform would have refused it).
func variableValue(v Variable) cty.Value {
	typ := strings.ReplaceAll(v.Type, " ", "")
	switch {
	case typ == "" || typ == "string":
		return cty.StringVal(v.Value)
	case typ == "number":
		if n, err := cty.ParseNumberVal(v.Value); err == nil {
			return n
		}
	case typ == "bool":
		if v.Value == "true" || v.Value == "false" {
			return cty.BoolVal(v.Value == "true")
		}
	default:
		if t, err := ctyjson.ImpliedType([]byte(v.Value)); err == nil {
			if val, err := ctyjson.Unmarshal([]byte(v.Value), t); err == nil {
				return val
			}
		}
	}
	return cty.StringVal(v.Value)
}

// evalContext binds data.coder_parameter.<label>.value for the labels
// references names, and var.
func evalContext(references, params map[string]string, vars cty.Value) (*hcl.EvalContext, error) {
	const prefix = "data.coder_parameter."
	labels := map[string]cty.Value{}
	keys := make([]string, 0, len(references))
	for k := range references {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, ref := range keys {
		label, ok := strings.CutPrefix(ref, prefix)
		if !ok || label == "" || strings.Contains(label, ".") {
			return nil, fmt.Errorf("reference %q is not of the form data.coder_parameter.<label>", ref)
		}
		name := references[ref]
		value, ok := params[name]
		if !ok {
			return nil, fmt.Errorf("%s refers to parameter %q, which has no value in this build", ref, name)
		}
		labels[label] = cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(value), "name": cty.StringVal(name)})
	}
	return &hcl.EvalContext{
		Variables: map[string]cty.Value{
			"data": cty.ObjectVal(map[string]cty.Value{"coder_parameter": cty.ObjectVal(labels)}),
			"var":  vars,
		},
		Functions: Functions(),
	}, nil
}

// evalKey evaluates a key of the tags object. As in any HCL object
// constructor, a bare identifier (`zone = …`) is the literal string
// "zone", not a reference.
func evalKey(src string, ctx *hcl.EvalContext) (string, error) {
	expr, diags := hclsyntax.ParseExpression([]byte(src), "workspace_tags.tf", hcl.InitialPos)
	if !diags.HasErrors() {
		if st, ok := expr.(*hclsyntax.ScopeTraversalExpr); ok && len(st.Traversal) == 1 {
			return st.Traversal.RootName(), nil
		}
	}
	return evalString(src, ctx)
}

// evalString evaluates HCL source text to a known string.
func evalString(src string, ctx *hcl.EvalContext) (string, error) {
	expr, diags := hclsyntax.ParseExpression([]byte(src), "workspace_tags.tf", hcl.InitialPos)
	if diags.HasErrors() {
		return "", fmt.Errorf("parse %q: %s", src, diagText(diags))
	}
	if err := checkReferences(expr, ctx); err != nil {
		return "", err
	}
	val, diags := expr.Value(ctx)
	if diags.HasErrors() {
		return "", fmt.Errorf("evaluate %q: %s", src, diagText(diags))
	}
	if !val.IsWhollyKnown() {
		return "", fmt.Errorf("%q is not known before the build", src)
	}
	if val.IsNull() {
		return "", fmt.Errorf("%q is null, want a string", src)
	}
	if !val.Type().IsPrimitiveType() {
		return "", fmt.Errorf("%q is a %s, want a string", src, val.Type().FriendlyName())
	}
	str, err := convert.Convert(val, cty.String)
	if err != nil {
		return "", fmt.Errorf("%q: convert to a string: %v", src, err)
	}
	return str.AsString(), nil
}

// checkReferences names references the context does not hold, before HCL
// gives its more generic "Unsupported attribute".
func checkReferences(expr hclsyntax.Expression, ctx *hcl.EvalContext) error {
	for _, tr := range expr.Variables() {
		root := tr.RootName()
		switch root {
		case "var":
			if len(tr) < 2 {
				return fmt.Errorf("var must be followed by a variable name")
			}
			name, ok := tr[1].(hcl.TraverseAttr)
			if !ok || !ctx.Variables["var"].Type().HasAttribute(name.Name) {
				return fmt.Errorf("unknown reference %s: the template version has no such variable", traversalText(tr))
			}
		case "data":
			ok := len(tr) >= 4
			if ok {
				typ, tok := tr[1].(hcl.TraverseAttr)
				label, lok := tr[2].(hcl.TraverseAttr)
				attr, aok := tr[3].(hcl.TraverseAttr)
				ok = tok && lok && aok && typ.Name == "coder_parameter" &&
					ctx.Variables["data"].GetAttr("coder_parameter").Type().HasAttribute(label.Name) &&
					(attr.Name == "value" || attr.Name == "name")
			}
			if !ok {
				return fmt.Errorf("unknown reference %s: workspace tags may refer to data.coder_parameter.<label>.value and var.<name> only", traversalText(tr))
			}
		default:
			return fmt.Errorf("unknown reference %s: workspace tags may refer to data.coder_parameter.<label>.value and var.<name> only", traversalText(tr))
		}
	}
	return nil
}

func traversalText(tr hcl.Traversal) string {
	var b strings.Builder
	for _, step := range tr {
		switch s := step.(type) {
		case hcl.TraverseRoot:
			b.WriteString(s.Name)
		case hcl.TraverseAttr:
			b.WriteString("." + s.Name)
		default:
			b.WriteString("[…]")
		}
	}
	return b.String()
}

func diagText(diags hcl.Diagnostics) string {
	var msgs []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		msgs = append(msgs, msg)
	}
	return strings.Join(msgs, "; ")
}
