package workspacetags_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"airgapcoder/coderd/workspacetags"
	"airgapcoder/codersdk"
)

func TestEvaluate(t *testing.T) {
	t.Parallel()
	refs := map[string]string{"data.coder_parameter.region": "Region", "data.coder_parameter.cache": "cache", "data.coder_parameter.cpu": "cpu"}
	in := workspacetags.Input{
		Parameters: map[string]string{"Region": "eu", "cache": "true", "cpu": "4", "unrelated": "x"},
		Variables: map[string]workspacetags.Variable{
			"zone":  {Value: "developers"},
			"count": {Value: "3", Type: "number"},
			"debug": {Value: "false", Type: "bool"},
			"azs":   {Value: `["a","b"]`, Type: "list(string)"},
		},
	}
	tag := func(key, value string) codersdk.WorkspaceTagExpression {
		return codersdk.WorkspaceTagExpression{Key: key, Value: value, References: refs}
	}
	for _, tc := range []struct {
		name    string
		exprs   []codersdk.WorkspaceTagExpression
		want    map[string]string
		wantErr string // substring of the error; "" means success
		errTag  string
	}{
		{name: "none", want: map[string]string{}},
		{name: "literal", exprs: []codersdk.WorkspaceTagExpression{tag(`"zone"`, `"developers"`)}, want: map[string]string{"zone": "developers"}},
		{name: "bare key is literal", exprs: []codersdk.WorkspaceTagExpression{tag(`zone`, `"developers"`)}, want: map[string]string{"zone": "developers"}},
		{name: "parenthesized key is evaluated", exprs: []codersdk.WorkspaceTagExpression{tag(`(var.zone)`, `"x"`)}, want: map[string]string{"developers": "x"}},
		{name: "parameter", exprs: []codersdk.WorkspaceTagExpression{tag(`"region"`, `data.coder_parameter.region.value`)}, want: map[string]string{"region": "eu"}},
		{name: "template string", exprs: []codersdk.WorkspaceTagExpression{tag(`"project"`, `"PROJECT_${data.coder_parameter.region.value}"`)},
			want: map[string]string{"project": "PROJECT_eu"}},
		{name: "conditional", exprs: []codersdk.WorkspaceTagExpression{tag(`"cache"`, `data.coder_parameter.cache.value == "true" ? "with-cache" : "no-cache"`)},
			want: map[string]string{"cache": "with-cache"}},
		{name: "variable", exprs: []codersdk.WorkspaceTagExpression{tag(`"zone"`, `var.zone`)}, want: map[string]string{"zone": "developers"}},
		{name: "number converted", exprs: []codersdk.WorkspaceTagExpression{tag(`"n"`, `var.count + 1`)}, want: map[string]string{"n": "4"}},
		{name: "bool converted", exprs: []codersdk.WorkspaceTagExpression{tag(`"debug"`, `var.debug`)}, want: map[string]string{"debug": "false"}},
		{name: "list element", exprs: []codersdk.WorkspaceTagExpression{tag(`"az"`, `var.azs[1]`)}, want: map[string]string{"az": "b"}},
		{name: "function", exprs: []codersdk.WorkspaceTagExpression{tag(`"region"`, `upper(data.coder_parameter.region.value)`)}, want: map[string]string{"region": "EU"}},
		{name: "computed key", exprs: []codersdk.WorkspaceTagExpression{tag(`"k-${var.zone}"`, `"v"`)}, want: map[string]string{"k-developers": "v"}},
		{name: "several", exprs: []codersdk.WorkspaceTagExpression{tag(`"a"`, `"1"`), tag(`"b"`, `data.coder_parameter.cpu.value`)},
			want: map[string]string{"a": "1", "b": "4"}},

		{name: "unknown parameter label", exprs: []codersdk.WorkspaceTagExpression{tag(`"os"`, `data.coder_parameter.os.value`)},
			wantErr: "unknown reference data.coder_parameter.os.value", errTag: "os"},
		{name: "unknown variable", exprs: []codersdk.WorkspaceTagExpression{tag(`"x"`, `var.nope`)}, wantErr: "unknown reference var.nope", errTag: "x"},
		{name: "other data source", exprs: []codersdk.WorkspaceTagExpression{tag(`"owner"`, `data.coder_workspace_owner.me.name`)},
			wantErr: "unknown reference data.coder_workspace_owner.me.name", errTag: "owner"},
		{name: "local", exprs: []codersdk.WorkspaceTagExpression{tag(`"l"`, `local.x`)}, wantErr: "unknown reference local.x", errTag: "l"},
		{name: "unsupported function", exprs: []codersdk.WorkspaceTagExpression{tag(`"f"`, `file("/etc/passwd")`)}, wantErr: "file", errTag: "f"},
		{name: "list value", exprs: []codersdk.WorkspaceTagExpression{tag(`"azs"`, `var.azs`)}, wantErr: "want a string", errTag: "azs"},
		{name: "object value", exprs: []codersdk.WorkspaceTagExpression{tag(`"o"`, `{a = "b"}`)}, wantErr: "want a string", errTag: "o"},
		{name: "null value", exprs: []codersdk.WorkspaceTagExpression{tag(`"n"`, `null`)}, wantErr: "null", errTag: "n"},
		{name: "syntax error", exprs: []codersdk.WorkspaceTagExpression{tag(`"s"`, `"unterminated`)}, wantErr: "parse", errTag: "s"},
		{name: "duplicate key", exprs: []codersdk.WorkspaceTagExpression{tag(`"a"`, `"1"`), tag(`"a"`, `"2"`)}, wantErr: "more than once", errTag: "a"},
		{name: "reference to a parameter without value",
			exprs:   []codersdk.WorkspaceTagExpression{{Key: `"m"`, Value: `data.coder_parameter.m.value`, References: map[string]string{"data.coder_parameter.m": "missing"}}},
			wantErr: `parameter "missing"`, errTag: `"m"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := workspacetags.Evaluate(tc.exprs, in)
			if tc.wantErr != "" {
				var te *workspacetags.Error
				if !errors.As(err, &te) {
					t.Fatalf("got error %v (tags %v), want a *workspacetags.Error containing %q", err, got, tc.wantErr)
				}
				if !strings.Contains(te.Error(), tc.wantErr) {
					t.Errorf("got error %q, want it to contain %q", te.Error(), tc.wantErr)
				}
				if te.Tag != tc.errTag {
					t.Errorf("got error naming tag %q, want %q", te.Tag, tc.errTag)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want tags %v", err, tc.want)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("got tags %v, want %v", got, tc.want)
			}
		})
	}
}
