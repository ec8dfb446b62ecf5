package parameters_test

import (
	"errors"
	"strings"
	"testing"

	"airgapcoder/coderd/parameters"
	"airgapcoder/codersdk"
)

func i32(v int32) *int32 { return &v }

func strp(s string) *string { return &s }

func TestValidate(t *testing.T) {
	t.Parallel()
	num := codersdk.TemplateVersionParameter{Name: "n", Type: codersdk.ParameterTypeNumber}
	for _, tc := range []struct {
		name     string
		p        codersdk.TemplateVersionParameter
		value    string
		previous *string
		rule     parameters.Rule // "" means valid
		detail   string
	}{
		{name: "string anything", p: codersdk.TemplateVersionParameter{Name: "s", Type: "string"}, value: "any thing"},
		{name: "number float without validation", p: num, value: "2.5"},
		{name: "number empty", p: num, value: "", rule: parameters.RuleType, detail: `"" is not a number`},
		{name: "number float under min", p: codersdk.TemplateVersionParameter{Name: "n", Type: "number", ValidationMin: i32(0)}, value: "2.5",
			rule: parameters.RuleType, detail: `value "2.5" is not a number`},
		{name: "min zero applies", p: codersdk.TemplateVersionParameter{Name: "n", Type: "number", ValidationMin: i32(0)}, value: "-1",
			rule: parameters.RuleMin, detail: "value -1 is less than the minimum 0"},
		{name: "rendered error on a non-number", p: codersdk.TemplateVersionParameter{Name: "n", Type: "number", ValidationMax: i32(3), ValidationError: "{value} is not between {min} and {max}"},
			value: "x", rule: parameters.RuleType, detail: "x is not between 0 and 3"},
		{name: "monotonic without previous", p: codersdk.TemplateVersionParameter{Name: "n", Type: "number", ValidationMonotonic: "increasing"}, value: "1"},
		{name: "monotonic with a non-number previous", p: codersdk.TemplateVersionParameter{Name: "n", Type: "number", ValidationMonotonic: "increasing"},
			value: "1", previous: strp("abc")},
		{name: "monotonic equal", p: codersdk.TemplateVersionParameter{Name: "n", Type: "number", ValidationMonotonic: "decreasing"}, value: "5", previous: strp("5")},
		{name: "monotonic unknown direction", p: codersdk.TemplateVersionParameter{Name: "n", Type: "number", ValidationMonotonic: "sideways"}, value: "5",
			rule: parameters.RuleMonotonic, detail: `"increasing" or "decreasing"`},
		{name: "min on a string", p: codersdk.TemplateVersionParameter{Name: "s", Type: "string", ValidationMin: i32(1)}, value: "a",
			rule: parameters.RuleMin, detail: "a min cannot be specified for a string type"},
		{name: "regex on a number", p: codersdk.TemplateVersionParameter{Name: "n", Type: "number", ValidationRegex: "^1"}, value: "1",
			rule: parameters.RuleRegex, detail: "a regex cannot be specified for a number type"},
		{name: "regex that does not compile", p: codersdk.TemplateVersionParameter{Name: "s", Type: "string", ValidationRegex: "("}, value: "a",
			rule: parameters.RuleRegex, detail: "does not compile"},
		{name: "regex error is not rendered", p: codersdk.TemplateVersionParameter{Name: "s", Type: "string", ValidationRegex: "^a", ValidationError: "{value} bad"},
			value: "b", rule: parameters.RuleRegex, detail: `{value} bad (value "b" does not match "^a")`},
		{name: "bool", p: codersdk.TemplateVersionParameter{Name: "b", Type: "bool"}, value: "true"},
		{name: "bool 1", p: codersdk.TemplateVersionParameter{Name: "b", Type: "bool"}, value: "1", rule: parameters.RuleType},
		{name: "option exact", p: codersdk.TemplateVersionParameter{Name: "o", Type: "number", Options: []codersdk.TemplateVersionParameterOption{{Value: "2"}}},
			value: "2.0", rule: parameters.RuleOption},
		{name: "options before type", p: codersdk.TemplateVersionParameter{Name: "o", Type: "number", Options: []codersdk.TemplateVersionParameterOption{{Value: "2"}}},
			value: "x", rule: parameters.RuleOption},
		{name: "list radio matches a whole option", p: codersdk.TemplateVersionParameter{Name: "l", Type: "list(string)",
			Options: []codersdk.TemplateVersionParameterOption{{Value: `["a","b"]`}, {Value: `["c"]`}}}, value: `["c"]`},
		{name: "list radio refuses a mix", p: codersdk.TemplateVersionParameter{Name: "l", Type: "list(string)", FormType: "radio",
			Options: []codersdk.TemplateVersionParameterOption{{Value: `["a","b"]`}, {Value: `["c"]`}}}, value: `["a","c"]`, rule: parameters.RuleOption},
		{name: "list multi-select by element", p: codersdk.TemplateVersionParameter{Name: "l", Type: "list(string)", FormType: "multi-select",
			Options: []codersdk.TemplateVersionParameterOption{{Value: "a"}, {Value: "b"}}}, value: `["b","a"]`},
		{name: "list string options by element without form type", p: codersdk.TemplateVersionParameter{Name: "l", Type: "list(string)",
			Options: []codersdk.TemplateVersionParameterOption{{Value: "a"}, {Value: "b"}}}, value: `["x"]`, rule: parameters.RuleOption, detail: `"x"`},
		{name: "list multi-select not a list", p: codersdk.TemplateVersionParameter{Name: "l", Type: "list(string)", FormType: "multi-select",
			Options: []codersdk.TemplateVersionParameterOption{{Value: "a"}}}, value: "a", rule: parameters.RuleType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := parameters.Validate(tc.p, tc.value, tc.previous)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("got %v, want %q valid", err, tc.value)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %q accepted, want the %s rule to refuse it", tc.value, tc.rule)
			}
			if err.Rule != tc.rule || err.Parameter != tc.p.Name || !strings.Contains(err.Detail, tc.detail) {
				t.Errorf("got %s rule on %s: %q, want %s rule containing %q", err.Rule, err.Parameter, err.Detail, tc.rule, tc.detail)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	declared := []codersdk.TemplateVersionParameter{
		{Name: "b", Type: "string", DefaultValue: "db", Mutable: true, Order: 2},
		{Name: "a", Type: "string", DefaultValue: "da", Order: 2},
		{Name: "e", Type: "string", DefaultValue: "de", Mutable: true, Ephemeral: true, Order: 1},
		{Name: "r", Type: "string", Required: true, Mutable: true, Order: 3},
	}
	res, err := parameters.Resolve(parameters.Input{
		Declared:  declared,
		Previous:  []codersdk.WorkspaceBuildParameter{{Name: "a", Value: "pa"}, {Name: "e", Value: "pe"}, {Name: "r", Value: "pr"}, {Name: "gone", Value: "x"}},
		Requested: []codersdk.WorkspaceBuildParameter{{Name: "a", Value: "pa"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := func(ps []codersdk.WorkspaceBuildParameter) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.Name+"="+p.Value)
		}
		return strings.Join(s, ",")
	}
	if g, want := got(res.Values), "e=de,a=pa,b=db,r=pr"; g != want {
		t.Errorf("values: got %s, want %s (ordered; ephemeral not carried; previous kept)", g, want)
	}
	if g, want := got(res.Stored), "a=pa,b=db,r=pr"; g != want {
		t.Errorf("stored: got %s, want %s", g, want)
	}
	if g, want := got(res.Ephemeral), "e=de"; g != want {
		t.Errorf("ephemeral: got %s, want %s", g, want)
	}

	_, err = parameters.Resolve(parameters.Input{Declared: declared, Requested: []codersdk.WorkspaceBuildParameter{{Name: "x", Value: "1"}}})
	var errs parameters.Errors
	if !errors.As(err, &errs) || len(errs) != 2 || errs[0].Rule != parameters.RuleUnknown || errs[1].Rule != parameters.RuleRequired {
		t.Errorf("unknown name and missing required: got %v, want both refused", err)
	}
}

// TestSorted: forms, prompts and builds list parameters by Order, then by
// name, and the caller's slice keeps its order.
func TestSorted(t *testing.T) {
	t.Parallel()
	in := []codersdk.TemplateVersionParameter{{Name: "b", Order: 2}, {Name: "z", Order: 1}, {Name: "a", Order: 2}, {Name: "y", Order: -1}}
	var got []string
	for _, p := range parameters.Sorted(in) {
		got = append(got, p.Name)
	}
	if want := "y z a b"; strings.Join(got, " ") != want {
		t.Errorf("Sorted: got %v, want %s", got, want)
	}
	if in[0].Name != "b" {
		t.Errorf("Sorted changed its argument: got first %q, want b", in[0].Name)
	}
}

// TestValidateOptions: a value is one of the options; a multi-select
// list's elements each are, a radio list's whole value is.
func TestValidateOptions(t *testing.T) {
	t.Parallel()
	opts := func(values ...string) []codersdk.TemplateVersionParameterOption {
		var out []codersdk.TemplateVersionParameterOption
		for _, v := range values {
			out = append(out, codersdk.TemplateVersionParameterOption{Name: v, Value: v})
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		p     codersdk.TemplateVersionParameter
		value string
		rule  parameters.Rule // "" means valid
	}{
		{"no options", codersdk.TemplateVersionParameter{Type: "string"}, "anything", ""},
		{"an option", codersdk.TemplateVersionParameter{Type: "string", Options: opts("eu", "us")}, "us", ""},
		{"not an option", codersdk.TemplateVersionParameter{Type: "string", Options: opts("eu", "us")}, "asia", parameters.RuleOption},
		{"multi-select elements", codersdk.TemplateVersionParameter{Type: "list(string)", FormType: "multi-select", Options: opts("git", "go")}, `["go","git"]`, ""},
		{"multi-select element not an option", codersdk.TemplateVersionParameter{Type: "list(string)", Options: opts("git", "go")}, `["go","rust"]`, parameters.RuleOption},
		{"multi-select not a list", codersdk.TemplateVersionParameter{Type: "list(string)", Options: opts("git", "go")}, "go", parameters.RuleType},
		{"radio list whole", codersdk.TemplateVersionParameter{Type: "list(string)", Options: opts(`["a","b"]`, `["c"]`)}, `["a","b"]`, ""},
		{"radio list part", codersdk.TemplateVersionParameter{Type: "list(string)", Options: opts(`["a","b"]`, `["c"]`)}, `["a"]`, parameters.RuleOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := parameters.ValidateOptions(tc.p, tc.value)
			switch {
			case tc.rule == "" && err != nil:
				t.Errorf("ValidateOptions(%q): got %v, want nil", tc.value, err)
			case tc.rule != "" && (err == nil || err.Rule != tc.rule):
				t.Errorf("ValidateOptions(%q): got %v, want the %s rule", tc.value, err, tc.rule)
			}
		})
	}
}
