// Package parameters resolves and validates the rich parameter values of a
// workspace build against the template version's `data "coder_parameter"`
// declarations.
//
// It follows the official coder/coder provider (v2.20.0,
// provider/parameter.go): a value is checked against the options first
// (validValue), then against the validation block (Validation.Valid, with
// {min}, {max} and {value} substituted in a number's validation error), then
// against the parameter's type (valueIsType). So a value the provider would
// refuse halfway through a terraform apply is refused when the build is
// requested instead. On top of the provider it enforces what coderd owns,
// as Coder's wsbuilder does: which value a build gets (the request's, else
// the previous build's unless ephemeral, else the default), required
// parameters, immutable parameters and unknown names.
//
// It is pure: no HTTP, no database (deps_test.go keeps it so). It owns
// the order parameters are shown in (Sort, Sorted) and the option check
// (ValidateOptions) for coderd and the CLI alike. Callers turn an Errors
// into their error envelope.
package parameters

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"airgapcoder/codersdk"
)

// Rule names the check a value failed.
type Rule string

// The rules.
const (
	RuleUnknown   Rule = "unknown"   // the template declares no such parameter
	RuleDuplicate Rule = "duplicate" // the request gives a parameter twice
	RuleRequired  Rule = "required"  // no value and no default
	RuleImmutable Rule = "immutable" // an immutable parameter changed after the first build
	RuleType      Rule = "type"      // not a number, bool or list(string) as declared
	RuleOption    Rule = "option"    // not one of the options
	RuleRegex     Rule = "regex"     // does not match validation.regex
	RuleMin       Rule = "min"       // below validation.min
	RuleMax       Rule = "max"       // above validation.max
	RuleMonotonic Rule = "monotonic" // breaks validation.monotonic against the previous value
)

// Error is one parameter's refused value.
type Error struct {
	Parameter string
	Rule      Rule
	// Detail says what is wrong, in the provider's words where it has some
	// (or the template's validation error).
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("parameter %q fails its %s rule: %s", e.Parameter, e.Rule, e.Detail)
}

// Errors are every refused value of a request, in parameter order.
type Errors []*Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Input is what a build's values are resolved from.
type Input struct {
	// Declared are the template version's parameters.
	Declared []codersdk.TemplateVersionParameter
	// Previous are the stored values of the workspace's previous build;
	// nil for its first build.
	Previous []codersdk.WorkspaceBuildParameter
	// Requested are the values the build request gives.
	Requested []codersdk.WorkspaceBuildParameter
}

// Result is a build's resolved values.
type Result struct {
	// Values holds every declared parameter's value for this build, in
	// parameter order (Sort): what the provisioner gets.
	Values []codersdk.WorkspaceBuildParameter
	// Stored is Values without ephemeral parameters: what the build keeps
	// and the next build inherits.
	Stored []codersdk.WorkspaceBuildParameter
	// Ephemeral are the values of ephemeral parameters, for this build only.
	Ephemeral []codersdk.WorkspaceBuildParameter
}

// Sort orders parameters as forms and prompts show them: by Order, then
// by name.
func Sort(ps []codersdk.TemplateVersionParameter) {
	slices.SortStableFunc(ps, func(a, b codersdk.TemplateVersionParameter) int {
		return cmp.Or(cmp.Compare(a.Order, b.Order), strings.Compare(a.Name, b.Name))
	})
}

// Sorted returns a copy of ps in Sort's order.
func Sorted(ps []codersdk.TemplateVersionParameter) []codersdk.TemplateVersionParameter {
	out := slices.Clone(ps)
	Sort(out)
	return out
}

// Resolve picks and validates every declared parameter's value for a
// build. A failure is an Errors naming each refused parameter.
func Resolve(in Input) (Result, error) {
	declared := Sorted(in.Declared)
	var errs Errors
	known := map[string]bool{}
	for _, p := range declared {
		known[p.Name] = true
	}
	requested := map[string]string{}
	for _, r := range in.Requested {
		switch _, dup := requested[r.Name]; {
		case !known[r.Name]:
			errs = append(errs, &Error{r.Name, RuleUnknown, fmt.Sprintf("the template declares no parameter %q", r.Name)})
		case dup:
			errs = append(errs, &Error{r.Name, RuleDuplicate, fmt.Sprintf("parameter %q is given more than once", r.Name)})
		}
		requested[r.Name] = r.Value
	}
	previous := map[string]string{}
	for _, p := range in.Previous {
		previous[p.Name] = p.Value
	}

	var res Result
	for _, p := range declared {
		req, hasReq := requested[p.Name]
		prev, hasPrev := previous[p.Name]
		var prevPtr *string
		if hasPrev {
			prevPtr = &prev
		}
		if !p.Mutable && hasReq && hasPrev && req != prev {
			errs = append(errs, &Error{p.Name, RuleImmutable, fmt.Sprintf("parameter %s is immutable and cannot be updated", p.Name)})
			continue
		}
		var value string
		switch {
		case hasReq:
			value = req
		case hasPrev && !p.Ephemeral:
			value = prev
		case p.Required:
			errs = append(errs, &Error{p.Name, RuleRequired, fmt.Sprintf("parameter %s is required and has no default: give it a value", p.Name)})
			continue
		default:
			value = p.DefaultValue
		}
		if p.Required && value == "" {
			errs = append(errs, &Error{p.Name, RuleRequired, fmt.Sprintf("parameter %s is required: its value must not be empty", p.Name)})
			continue
		}
		if err := Validate(p, value, prevPtr); err != nil {
			errs = append(errs, err)
			continue
		}
		v := codersdk.WorkspaceBuildParameter{Name: p.Name, Value: value}
		res.Values = append(res.Values, v)
		if p.Ephemeral {
			res.Ephemeral = append(res.Ephemeral, v)
		} else {
			res.Stored = append(res.Stored, v)
		}
	}
	if len(errs) > 0 {
		return Result{}, errs
	}
	return res, nil
}

// Validate checks value for p as the provider's ValidateInput does:
// options, then the validation block, then the type. previous is the
// previous build's value (for monotonic rules), nil when there is none.
func Validate(p codersdk.TemplateVersionParameter, value string, previous *string) *Error {
	fail := func(rule Rule, format string, args ...any) *Error {
		return &Error{Parameter: p.Name, Rule: rule, Detail: fmt.Sprintf(format, args...)}
	}
	if err := ValidateOptions(p, value); err != nil {
		return err
	}
	if err := validateRules(p, value, previous, fail); err != nil {
		return err
	}
	switch p.Type {
	case codersdk.ParameterTypeNumber:
		if _, err := strconv.ParseFloat(value, 64); err != nil {
			return fail(RuleType, "%q is not a number", value)
		}
	case codersdk.ParameterTypeBool:
		// The provider's validation (and Coder's coderd) accept exactly
		// these two spellings.
		if value != "true" && value != "false" {
			return fail(RuleType, `boolean value can be either "true" or "false", got %q`, value)
		}
	case codersdk.ParameterTypeListString:
		if _, err := listOfStrings(value); err != nil {
			return fail(RuleType, "value %q is not a valid list of strings", value)
		}
	default:
		// string, and types the provider does not have (versions imported
		// before coder_parameter, whose parameters were Terraform
		// variables): terraform checks those itself.
	}
	return nil
}

// ValidateOptions checks value against p's options, the first half of the
// provider's validValue: nil when p has no options or value is one of them
// (for a multi-select list(string), when each element is one of them).
func ValidateOptions(p codersdk.TemplateVersionParameter, value string) *Error {
	if len(p.Options) == 0 {
		return nil
	}
	fail := func(rule Rule, format string, args ...any) *Error {
		return &Error{Parameter: p.Name, Rule: rule, Detail: fmt.Sprintf(format, args...)}
	}
	options := map[string]bool{}
	quoted := make([]string, 0, len(p.Options))
	for _, o := range p.Options {
		options[o.Value] = true
		quoted = append(quoted, strconv.Quote(o.Value))
	}
	if !elementOptions(p) {
		if !options[value] {
			return fail(RuleOption, "value %q is not one of the options (%s)", value, strings.Join(quoted, ", "))
		}
		return nil
	}
	items, err := listOfStrings(value)
	if err != nil {
		return fail(RuleType, "value %q is not a JSON-encoded list of strings", value)
	}
	var missing []string
	for _, item := range items {
		if !options[item] {
			missing = append(missing, strconv.Quote(item))
		}
	}
	if len(missing) > 0 {
		return fail(RuleOption, "values %s of %q are not among the options (%s)", strings.Join(missing, ", "), value, strings.Join(quoted, ", "))
	}
	return nil
}

// elementOptions reports whether each element of a list(string) value is
// checked against the options (the provider's multi-select, whose options
// are strings) rather than the whole value (radio, whose options are JSON
// lists). With no form_type reported, the option values decide.
func elementOptions(p codersdk.TemplateVersionParameter) bool {
	if p.Type != codersdk.ParameterTypeListString {
		return false
	}
	switch p.FormType {
	case "multi-select":
		return true
	case "":
		for _, o := range p.Options {
			if _, err := listOfStrings(o.Value); err != nil {
				return true
			}
		}
	}
	return false
}

// hasValidation reports whether the parameter has a validation block the
// provider would run (Coder's validationEnabled also always checks bool and
// list(string) values; Validate's type check covers those).
func hasValidation(p codersdk.TemplateVersionParameter) bool {
	return p.ValidationRegex != "" || p.ValidationMin != nil || p.ValidationMax != nil || p.ValidationMonotonic != ""
}

// validateRules is the provider's Validation.Valid.
func validateRules(p codersdk.TemplateVersionParameter, value string, previous *string, fail func(Rule, string, ...any) *Error) *Error {
	if !hasValidation(p) {
		return nil
	}
	typ := p.Type
	if typ == "" {
		typ = codersdk.ParameterTypeString
	}
	if typ != codersdk.ParameterTypeNumber {
		switch {
		case p.ValidationMin != nil:
			return fail(RuleMin, "a min cannot be specified for a %s type", typ)
		case p.ValidationMax != nil:
			return fail(RuleMax, "a max cannot be specified for a %s type", typ)
		case p.ValidationMonotonic != "":
			return fail(RuleMonotonic, "monotonic validation can only be specified for number types, not %s types", typ)
		}
	}
	if typ != codersdk.ParameterTypeString && p.ValidationRegex != "" {
		return fail(RuleRegex, "a regex cannot be specified for a %s type", typ)
	}
	switch typ {
	case codersdk.ParameterTypeString:
		re, err := regexp.Compile(p.ValidationRegex)
		if err != nil {
			return fail(RuleRegex, "the template's regex %q does not compile: %v", p.ValidationRegex, err)
		}
		if re.MatchString(value) {
			return nil
		}
		if p.ValidationError == "" {
			return fail(RuleRegex, "value %q does not match the regex %q", value, p.ValidationRegex)
		}
		return fail(RuleRegex, "%s (value %q does not match %q)", p.ValidationError, value, p.ValidationRegex)
	case codersdk.ParameterTypeNumber:
		return validateNumber(p, value, previous, fail)
	}
	return nil
}

func validateNumber(p codersdk.TemplateVersionParameter, value string, previous *string, fail func(Rule, string, ...any) *Error) *Error {
	var lo, hi int
	if p.ValidationMin != nil {
		lo = int(*p.ValidationMin)
	}
	if p.ValidationMax != nil {
		hi = int(*p.ValidationMax)
	}
	// rendered is the template's validation error with {min}, {max} and
	// {value} substituted; the provider prefers it to its own message.
	rendered := func(rule Rule, format string, args ...any) *Error {
		if p.ValidationError != "" {
			r := strings.NewReplacer("{min}", strconv.Itoa(lo), "{max}", strconv.Itoa(hi), "{value}", value)
			return fail(rule, "%s", r.Replace(p.ValidationError))
		}
		return fail(rule, format, args...)
	}
	num, err := strconv.Atoi(value)
	if err != nil {
		return rendered(RuleType, "value %q is not a number", value)
	}
	if p.ValidationMin != nil && num < lo {
		return rendered(RuleMin, "value %d is less than the minimum %d", num, lo)
	}
	if p.ValidationMax != nil && num > hi {
		return rendered(RuleMax, "value %d is more than the maximum %d", num, hi)
	}
	switch p.ValidationMonotonic {
	case "":
	case "increasing", "decreasing":
		if previous == nil {
			return nil
		}
		prev, err := strconv.Atoi(*previous)
		if err != nil {
			// As the provider: a previous value that is not a number must
			// not lock the workspace.
			return nil
		}
		if p.ValidationMonotonic == "increasing" && num < prev {
			return fail(RuleMonotonic, "parameter value '%d' must be equal or greater than previous value: %d", num, prev)
		}
		if p.ValidationMonotonic == "decreasing" && num > prev {
			return fail(RuleMonotonic, "parameter value '%d' must be equal or lower than previous value: %d", num, prev)
		}
	default:
		return fail(RuleMonotonic, "number monotonicity can be either %q or %q", "increasing", "decreasing")
	}
	return nil
}

func listOfStrings(value string) ([]string, error) {
	var items []string
	err := json.Unmarshal([]byte(value), &items)
	return items, err
}
