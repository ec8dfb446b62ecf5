package provisionerd

import (
	"encoding/json"
	"math/big"
	"regexp"
	"regexp/syntax"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// Placeholder values for imports. data "coder_parameter" reads its value
// from CODER_PARAMETER_<hash>; without one it takes its default. A required
// parameter (no default) has no value during an import, and the provider
// then accepts it only when the block has no validation block: with one, it
// validates the empty string (not a number, not an option, no regex match)
// and the plan fails. So the import hands such parameters a value that
// passes their validation, read statically from the block: the first
// option, the minimum (else maximum, else 0) of a number, false, an empty
// list, or a string generated from the regex. A parameter whose block is
// not static enough to tell gets nothing, and the provider's own error
// explains.

// staticParameter is what the daemon reads of a coder_parameter block
// without terraform.
type staticParameter struct {
	name, typ, formType string
	required            bool // no default
	validated           bool // has a validation block
	options             []string
	min, max            *big.Float
	regex               string
}

// staticParameters reads the root module's data "coder_parameter" blocks
// whose name is a literal.
func staticParameters(root string) []staticParameter {
	var params []staticParameter
	for _, f := range parseDir(root, root) {
		for _, b := range f.body.Blocks {
			if b.Type != "data" || len(b.Labels) != 2 || b.Labels[0] != "coder_parameter" {
				continue
			}
			attrs := b.Body.Attributes
			p := staticParameter{name: literal(attrs["name"]), typ: literal(attrs["type"]), formType: literal(attrs["form_type"])}
			if p.name == "" {
				continue
			}
			if p.typ == "" {
				p.typ = "string"
			}
			def, ok := attrs["default"]
			p.required = !ok || isNullLiteral(def.Expr)
			for _, nb := range b.Body.Blocks {
				switch nb.Type {
				case "option":
					if v := literal(nb.Body.Attributes["value"]); v != "" {
						p.options = append(p.options, v)
					}
				case "validation":
					p.validated = true
					p.min = number(nb.Body.Attributes["min"])
					p.max = number(nb.Body.Attributes["max"])
					p.regex = literal(nb.Body.Attributes["regex"])
				}
			}
			params = append(params, p)
		}
	}
	return params
}

// importPlaceholders returns a placeholder value by parameter name for the
// required, validated parameters that need one.
func importPlaceholders(params []staticParameter) map[string]string {
	out := map[string]string{}
	for _, p := range params {
		if !p.required || !p.validated {
			continue
		}
		if v, ok := p.placeholder(); ok {
			out[p.name] = v
		}
	}
	return out
}

func (p staticParameter) placeholder() (string, bool) {
	if len(p.options) > 0 {
		if p.typ == "list(string)" && p.formType == "multi-select" {
			b, _ := json.Marshal([]string{p.options[0]})
			return string(b), true
		}
		return p.options[0], true
	}
	switch p.typ {
	case "number":
		switch {
		case p.min != nil:
			return p.min.Text('f', -1), true
		case p.max != nil:
			return p.max.Text('f', -1), true
		}
		return "0", true
	case "bool":
		return "false", true
	case "list(string)":
		return "[]", true
	}
	if p.regex == "" {
		return "", false // validated without a regex: the empty string passes
	}
	return regexSample(p.regex)
}

// literal evaluates an attribute that needs no context to a string ("" when
// absent or not a literal string, number or bool).
func literal(a *hclsyntax.Attribute) string {
	if a == nil {
		return ""
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.IsNull() || !v.IsWhollyKnown() {
		return ""
	}
	switch v.Type() {
	case cty.String:
		return v.AsString()
	case cty.Number:
		return v.AsBigFloat().Text('f', -1)
	case cty.Bool:
		if v.True() {
			return "true"
		}
		return "false"
	}
	return ""
}

func number(a *hclsyntax.Attribute) *big.Float {
	if a == nil {
		return nil
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.IsNull() || !v.IsWhollyKnown() || v.Type() != cty.Number {
		return nil
	}
	return v.AsBigFloat()
}

func isNullLiteral(e hclsyntax.Expression) bool {
	return hcl.ExprAsKeyword(e) == "null"
}

// regexSample returns a string the regular expression matches (as the
// provider's regexp.MatchString), built from its syntax tree: the first
// alternative, the minimum repetitions, the first printable character of
// a class.
func regexSample(expr string) (string, bool) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return "", false
	}
	var b strings.Builder
	if !writeSample(&b, re.Simplify()) {
		return "", false
	}
	s := b.String()
	if compiled, err := regexp.Compile(expr); err != nil || !compiled.MatchString(s) {
		return "", false
	}
	return s, true
}

func writeSample(b *strings.Builder, re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpLiteral:
		b.WriteString(string(re.Rune))
	case syntax.OpCharClass:
		r, ok := classSample(re.Rune)
		if !ok {
			return false
		}
		b.WriteRune(r)
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		b.WriteByte('a')
	case syntax.OpCapture, syntax.OpPlus:
		return writeSample(b, re.Sub[0])
	case syntax.OpRepeat:
		for range re.Min {
			if !writeSample(b, re.Sub[0]) {
				return false
			}
		}
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if !writeSample(b, sub) {
				return false
			}
		}
	case syntax.OpAlternate:
		return writeSample(b, re.Sub[0])
	case syntax.OpNoMatch:
		return false
	default:
		// Empty matches, anchors, boundaries, star and quest: nothing.
	}
	return true
}

// classSample picks a character of a class (pairs of inclusive ranges):
// a lower-case letter if it has one, else a digit, an upper-case letter,
// any printable ASCII character, in that order.
func classSample(ranges []rune) (rune, bool) {
	if len(ranges) < 2 {
		return 0, false
	}
	for _, want := range [][2]rune{{'a', 'z'}, {'0', '9'}, {'A', 'Z'}, {'!', '~'}} {
		for i := 0; i+1 < len(ranges); i += 2 {
			if lo, hi := max(ranges[i], want[0]), min(ranges[i+1], want[1]); lo <= hi {
				return lo, true
			}
		}
	}
	return ranges[0], true
}
