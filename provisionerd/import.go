package provisionerd

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-config-inspect/tfconfig"
	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"

	"airgapcoder/codersdk"
)

// importTemplate plans the template as a workspace's first start and
// records its Terraform variables, its coder_parameter data sources (read
// during the plan), its coder_external_auth data sources, its
// coder_workspace_tags entries and its resources.
func (r *tfRun) importTemplate() (codersdk.CompleteJobRequest, error) {
	var result codersdk.CompleteJobRequest
	module, diags := tfconfig.LoadModule(r.src)
	if diags.HasErrors() {
		return result, fmt.Errorf("parse template: %w", diags.Err())
	}
	variables, err := templateVariables(module, r.job.VariableValues)
	if err != nil {
		return result, err
	}
	result.Variables = variables
	placeholders := importPlaceholders(staticParameters(r.src))
	for _, name := range slices.Sorted(maps.Keys(placeholders)) {
		r.env[parameterEnv(name)] = placeholders[name]
		r.logs.Info(fmt.Sprintf("Parameter %q is required and validated: the import plans with the value %q in its place", name, placeholders[name]))
	}
	// Before terraform runs: everything from outside the template folder
	// must be in the mirrors (preflight.go).
	if err := r.d.preflight(r.ctx, r.src); err != nil {
		return result, err
	}
	if err := r.init(); err != nil {
		return result, err
	}

	planFile := filepath.Join(r.dir, "import.tfplan")
	planOpts := []tfexec.PlanOption{tfexec.Out(planFile), tfexec.Refresh(false)}
	for _, v := range r.vars() {
		planOpts = append(planOpts, tfexec.Var(v))
	}
	if err := r.run("Planning", func(t *tfexec.Terraform) error {
		_, err := t.Plan(r.ctx, planOpts...)
		return err
	}); err != nil {
		return result, fmt.Errorf("terraform plan: %w", err)
	}
	var plan *tfjson.Plan
	if err := r.run("Reading plan", func(t *tfexec.Terraform) error {
		t.SetStdout(io.Discard) // the plan JSON is not a log
		plan, err = t.ShowPlanFile(r.ctx, planFile)
		return err
	}); err != nil {
		return result, fmt.Errorf("read plan: %w", err)
	}

	// Data sources are read while planning: they are in the prior state.
	var labels map[string]string
	if plan.PriorState != nil && plan.PriorState.Values != nil {
		result.Parameters, labels, err = parametersOf(plan.PriorState.Values.RootModule)
		if err != nil {
			return result, err
		}
	}
	var stateModules []*tfjson.StateModule
	if plan.PriorState != nil && plan.PriorState.Values != nil {
		stateModules = append(stateModules, plan.PriorState.Values.RootModule)
	}
	if plan.PlannedValues != nil {
		stateModules = append(stateModules, plan.PlannedValues.RootModule)
	}
	result.ExternalAuthProviders = externalAuthProviders(stateModules...)
	declared := map[string]bool{}
	for name := range module.Variables {
		declared[name] = true
	}
	if result.WorkspaceTags, err = workspaceTags(r.src, labels, declared); err != nil {
		return result, err
	}
	if plan.PlannedValues != nil {
		result.Resources, err = convertResources(plan.PlannedValues.RootModule, plan.Config, false)
		if err != nil {
			return result, err
		}
	}
	return result, nil
}

// templateVariables pairs the template's variables with the values given
// at push. A value counts as given even when empty. A required variable
// without a value, or a value for a variable the template does not
// declare, is an error that says how to push the version.
func templateVariables(m *tfconfig.Module, values []codersdk.VariableValue) ([]codersdk.TemplateVersionVariable, error) {
	given := map[string]string{}
	for _, v := range values {
		if _, ok := m.Variables[v.Name]; !ok {
			return nil, fmt.Errorf("a value was given for template variable %q, which the template does not declare (it declares: %s)",
				v.Name, strings.Join(slices.Sorted(maps.Keys(m.Variables)), ", "))
		}
		given[v.Name] = v.Value
	}
	var out []codersdk.TemplateVersionVariable
	var missing []string
	for _, name := range slices.Sorted(maps.Keys(m.Variables)) {
		v := m.Variables[name]
		tv := codersdk.TemplateVersionVariable{
			Name: name, Description: v.Description, Type: variableType(v), Required: v.Required, Sensitive: v.Sensitive,
			DefaultValue: variableDefault(v.Default),
		}
		value, ok := given[name]
		switch {
		case ok:
			tv.Value = value
		case v.Required:
			missing = append(missing, name)
		default:
			tv.Value = tv.DefaultValue // what terraform uses
		}
		out = append(out, tv)
	}
	if len(missing) > 0 {
		var flags []string
		for _, name := range missing {
			flags = append(flags, "--variable "+name+"=VALUE")
		}
		noun := "variable " + quoteList(missing) + " is"
		if len(missing) > 1 {
			noun = "variables " + quoteList(missing) + " are"
		}
		return nil, fmt.Errorf("template %s required (no default) but has no value: push the template with coder templates push %s",
			noun, strings.Join(flags, " "))
	}
	return out, nil
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// variableType is the variable's declared type, else the type of its
// default, else string.
func variableType(v *tfconfig.Variable) string {
	if v.Type != "" {
		return v.Type
	}
	switch v.Default.(type) {
	case bool:
		return "bool"
	case float64, json.Number, int:
		return "number"
	}
	return "string"
}

// variableDefault formats a default as -var would take it: strings as
// they are, anything else as JSON.
func variableDefault(d any) string {
	switch v := d.(type) {
	case nil:
		return ""
	case string:
		return v
	}
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Sprint(d)
	}
	return string(b)
}

// parametersOf reads the data "coder_parameter" sources of a plan's prior
// state (root and child modules). It also returns the root module's
// parameter names by address (data.coder_parameter.<label>), for workspace
// tags. Two parameters with one name are an error.
func parametersOf(root *tfjson.StateModule) ([]codersdk.TemplateVersionParameter, map[string]string, error) {
	var params []codersdk.TemplateVersionParameter
	labels := map[string]string{}
	seen := map[string]string{} // name -> address
	var walk func(m *tfjson.StateModule) error
	walk = func(m *tfjson.StateModule) error {
		if m == nil {
			return nil
		}
		for _, r := range m.Resources {
			if r.Mode != tfjson.DataResourceMode || r.Type != "coder_parameter" {
				continue
			}
			p := parameterOf(r.AttributeValues)
			if prev, dup := seen[p.Name]; dup {
				return fmt.Errorf("coder_parameter names must be unique: %s and %s are both named %q", prev, r.Address, p.Name)
			}
			seen[p.Name] = r.Address
			if r.Index == nil && !strings.HasPrefix(r.Address, "module.") {
				labels[r.Address] = p.Name
			}
			params = append(params, p)
		}
		for _, c := range m.ChildModules {
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return nil, nil, err
	}
	sort.SliceStable(params, func(i, j int) bool {
		if params[i].Order != params[j].Order {
			return params[i].Order < params[j].Order
		}
		return params[i].Name < params[j].Name
	})
	return params, labels, nil
}

// parameterOf converts a coder_parameter's attributes as the provider left
// them: form_type is the one it resolved, optional says whether the block
// has a default, min_disabled/max_disabled whether min and max were set.
func parameterOf(v map[string]any) codersdk.TemplateVersionParameter {
	p := codersdk.TemplateVersionParameter{
		Name: str(v["name"]), DisplayName: str(v["display_name"]), Description: str(v["description"]),
		Type: str(v["type"]), FormType: str(v["form_type"]), DefaultValue: str(v["default"]), Icon: str(v["icon"]),
		Required: !boolean(v["optional"]), Mutable: boolean(v["mutable"]), Ephemeral: boolean(v["ephemeral"]),
		Order: int32(num(v["order"])),
	}
	if p.Type == "" {
		p.Type = codersdk.ParameterTypeString
	}
	for _, o := range objects(v["option"]) {
		p.Options = append(p.Options, codersdk.TemplateVersionParameterOption{
			Name: str(o["name"]), Description: str(o["description"]), Value: str(o["value"]), Icon: str(o["icon"]),
		})
	}
	if vs := objects(v["validation"]); len(vs) > 0 {
		val := vs[0]
		p.ValidationRegex, p.ValidationError, p.ValidationMonotonic = str(val["regex"]), str(val["error"]), str(val["monotonic"])
		if !boolean(val["min_disabled"]) && val["min"] != nil {
			n := int32(num(val["min"]))
			p.ValidationMin = &n
		}
		if !boolean(val["max_disabled"]) && val["max"] != nil {
			n := int32(num(val["max"]))
			p.ValidationMax = &n
		}
	}
	return p
}
