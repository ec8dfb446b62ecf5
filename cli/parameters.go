package cli

// Workspace build parameters on the command line: the flags that give them
// (named as in Coder's CLI), the rich parameter file, which parameters a
// command asks for on a terminal, and the wording of coderd's refusals.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"airgapcoder/coderd/parameters"
	"airgapcoder/codersdk"
)

// parameterFlags are the flags of the commands that build a workspace with
// new parameter values.
type parameterFlags struct {
	values          []string // --parameter name=value
	file            string   // --rich-parameter-file
	defaults        []string // --parameter-default name=value
	ephemeral       []string // --ephemeral-parameter name=value
	promptEphemeral bool     // --prompt-ephemeral-parameters
	alwaysPrompt    bool     // --always-prompt (update only)
}

// parameterOptions add the CODER_* variables Coder's CLI reads for the
// parameter flags.
var parameterOptions = options{
	{flag: "parameter", env: "CODER_RICH_PARAMETER"},
	{flag: "rich-parameter-file", env: "CODER_RICH_PARAMETER_FILE"},
	{flag: "parameter-default", env: "CODER_RICH_PARAMETER_DEFAULT"},
	{flag: "ephemeral-parameter", env: "CODER_EPHEMERAL_PARAMETER"},
	{flag: "prompt-ephemeral-parameters", env: "CODER_PROMPT_EPHEMERAL_PARAMETERS"},
}

func (f *parameterFlags) register(fs *pflag.FlagSet, update bool) {
	fs.StringArrayVar(&f.values, "parameter", nil, `Parameter value as "name=value" (repeatable); list(string) values as JSON, e.g. 'tools=["git","go"]'`)
	fs.StringVar(&f.file, "rich-parameter-file", "", "YAML file of parameter values (name: value; lists as YAML lists); --parameter overrides it")
	fs.StringArrayVar(&f.defaults, "parameter-default", nil, `Default to offer (or take with -y) for a parameter, as "name=value" (repeatable)`)
	fs.StringArrayVar(&f.ephemeral, "ephemeral-parameter", nil, `Value of an ephemeral parameter (a build option, for this build only), as "name=value" (repeatable)`)
	fs.BoolVar(&f.promptEphemeral, "prompt-ephemeral-parameters", false, "Ask for the ephemeral parameters not given with --ephemeral-parameter")
	if update {
		fs.BoolVar(&f.alwaysPrompt, "always-prompt", false, "Ask for every mutable parameter, offering its current value")
	}
}

// parameterValues are the values a command line gives.
type parameterValues struct {
	// given are --parameter values over those of --rich-parameter-file.
	given     map[string]string
	ephemeral map[string]string
	defaults  map[string]string
}

// parse reads the flags and the file; a mistake in them is a usage error.
// A name given twice takes its last value, as in Coder's CLI.
func (f *parameterFlags) parse() (parameterValues, error) {
	var v parameterValues
	var err error
	v.given = map[string]string{}
	if f.file != "" {
		if v.given, err = readValuesFile(f.file, false); err != nil {
			return v, usageErrorf("--rich-parameter-file %s: %v", f.file, err)
		}
	}
	flags, err := parseKeyValuesLastWins("parameter", f.values)
	if err != nil {
		return v, err
	}
	maps.Copy(v.given, flags)
	if v.ephemeral, err = parseKeyValuesLastWins("ephemeral-parameter", f.ephemeral); err != nil {
		return v, err
	}
	if v.defaults, err = parseKeyValuesLastWins("parameter-default", f.defaults); err != nil {
		return v, err
	}
	return v, nil
}

// any reports whether the command line sets or asks for anything.
func (f *parameterFlags) any() bool {
	return len(f.values) > 0 || f.file != "" || len(f.ephemeral) > 0 || f.promptEphemeral || f.alwaysPrompt
}

// readValuesFile reads a YAML map of names to values, as Coder's
// --rich-parameter-file and --variables-file take it. Scalars keep their
// text as written ("08" stays "08"); a list becomes a JSON list of strings,
// which is how list(string) parameters carry their value. With allowMaps a
// map or a nested list becomes JSON too (Terraform variables of map or
// object type).
func readValuesFile(path string, allowMaps bool) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	if len(doc.Content) == 0 {
		return out, nil // an empty file
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a map of names to values, like `cpu: 4`", m.Line)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, val := m.Content[i], m.Content[i+1]
		if _, dup := out[k.Value]; dup {
			return nil, fmt.Errorf("line %d: %s is given twice", k.Line, k.Value)
		}
		switch {
		case val.Kind == yaml.ScalarNode && val.Tag == "!!null":
			out[k.Value] = ""
		case val.Kind == yaml.ScalarNode:
			out[k.Value] = val.Value
		case val.Kind == yaml.SequenceNode && !allowMaps:
			list := []string{}
			for _, item := range val.Content {
				if item.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("line %d: %s: a list may hold only plain values", item.Line, k.Value)
				}
				list = append(list, item.Value)
			}
			j, _ := json.Marshal(list)
			out[k.Value] = string(j)
		case allowMaps && (val.Kind == yaml.SequenceNode || val.Kind == yaml.MappingNode):
			var v any
			if err := val.Decode(&v); err != nil {
				return nil, fmt.Errorf("line %d: %s: %v", val.Line, k.Value, err)
			}
			j, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: %v", val.Line, k.Value, err)
			}
			out[k.Value] = string(j)
		default:
			return nil, fmt.Errorf("line %d: %s: want a value or a list of values", val.Line, k.Value)
		}
	}
	return out, nil
}

// buildAction is what a build with parameters does to a workspace.
type buildAction int

const (
	actionCreate buildAction = iota
	actionUpdate
)

// parameterPlan is everything that decides one build's parameter values.
type parameterPlan struct {
	action buildAction
	// params are the parameters of the template version to build.
	params []codersdk.TemplateVersionParameter
	values parameterValues
	// previous are the values of the workspace's latest build, and
	// previousDeclared the parameter names its template version declared
	// (update only; nil previousDeclared means "whatever has a value").
	previous         map[string]string
	previousDeclared map[string]bool
	promptEphemeral  bool
	alwaysPrompt     bool
	// useDefaults (-y) takes each default instead of asking.
	useDefaults bool
}

// resolve returns the values to send with the build, asking on ask (nil
// when there is no terminal) for the parameters Coder's CLI asks for:
//
//   - create: every parameter not given, ephemeral ones only with
//     --prompt-ephemeral-parameters;
//   - update: parameters new in the version, required ones without a value,
//     ones whose value is no longer an option, and with --always-prompt
//     every mutable one.
//
// Parameters neither given nor asked for are left out: coderd keeps their
// previous value or applies the template's default. A required parameter
// that ends up without a value is an error naming it and the flag to use.
func (pl parameterPlan) resolve(ask *prompter) ([]codersdk.WorkspaceBuildParameter, error) {
	declared := map[string]codersdk.TemplateVersionParameter{}
	for _, p := range pl.params {
		declared[p.Name] = p
	}
	if err := pl.checkNames(declared); err != nil {
		return nil, err
	}
	var out []codersdk.WorkspaceBuildParameter
	var missing []string
	for _, p := range parameters.Sorted(pl.params) {
		value, ok, err := pl.resolveOne(p, ask)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, codersdk.WorkspaceBuildParameter{Name: p.Name, Value: value})
			continue
		}
		if _, hasPrev := pl.previous[p.Name]; p.Required && !hasPrev {
			missing = append(missing, fmt.Sprintf("%q", p.Name))
		}
	}
	if len(missing) > 0 {
		names, has, it := "parameter "+missing[0], "has", "it"
		if len(missing) > 1 {
			names, has, it = "parameters "+strings.Join(missing, ", "), "have", "each"
		}
		if pl.useDefaults {
			return nil, fmt.Errorf("-y takes defaults, but required %s %s none: give %s with --parameter NAME=VALUE", names, has, it)
		}
		return nil, fmt.Errorf("required %s %s no value and stdin is not a terminal to ask on: give %s with --parameter NAME=VALUE or in --rich-parameter-file",
			names, has, it)
	}
	return out, nil
}

// resolveOne returns p's value and whether the build should carry it.
func (pl parameterPlan) resolveOne(p codersdk.TemplateVersionParameter, ask *prompter) (string, bool, error) {
	if p.Ephemeral {
		if v, ok := pl.values.ephemeral[p.Name]; ok {
			return v, true, nil
		}
		if !pl.promptEphemeral || pl.useDefaults || ask == nil {
			return "", false, nil // this build uses the default
		}
		v, err := ask.parameter(p, p.DefaultValue, true, nil)
		return v, err == nil, err
	}
	if v, ok := pl.values.given[p.Name]; ok {
		return v, true, nil
	}
	if v, ok := pl.values.ephemeral[p.Name]; ok {
		return v, true, nil // Coder takes --ephemeral-parameter for any parameter
	}
	prev, hasPrev := pl.previous[p.Name]
	if !pl.needsAnswer(p) {
		if pl.action == actionUpdate && pl.alwaysPrompt && !p.Mutable && ask != nil {
			fmt.Fprintf(ask.out, "Parameter %q is immutable: it keeps %q for the workspace's life.\n", p.Name, prev)
		}
		return "", false, nil
	}
	def, fromFlag := pl.values.defaults[p.Name]
	if !fromFlag {
		def = p.DefaultValue
		if hasPrev && parameters.ValidateOptions(p, prev) == nil {
			def = prev
		}
	}
	hasDefault := fromFlag || def != "" || !p.Required
	switch {
	case pl.useDefaults && hasDefault:
		if ask != nil {
			fmt.Fprintf(ask.out, "Using the default value for %s: %q\n", p.Name, def)
		}
		return def, true, nil
	case pl.useDefaults:
		return "", false, nil // missing
	case ask != nil:
		var previous *string
		if hasPrev {
			previous = &prev
		}
		v, err := ask.parameter(p, def, hasDefault, previous)
		return v, err == nil, err
	case fromFlag:
		return def, true, nil
	}
	return "", false, nil // coderd's default, or missing when required
}

// needsAnswer reports whether the build needs a decision on p beyond what
// the workspace already has.
func (pl parameterPlan) needsAnswer(p codersdk.TemplateVersionParameter) bool {
	if pl.action == actionCreate {
		return true
	}
	prev, hasPrev := pl.previous[p.Name]
	isNew := !hasPrev
	if pl.previousDeclared != nil {
		isNew = !pl.previousDeclared[p.Name]
	}
	return isNew || (p.Required && !hasPrev) || (hasPrev && parameters.ValidateOptions(p, prev) != nil) || (pl.alwaysPrompt && p.Mutable)
}

// checkNames refuses values for parameters the version does not declare,
// and --parameter for ephemeral ones (as Coder's CLI does).
func (pl parameterPlan) checkNames(declared map[string]codersdk.TemplateVersionParameter) error {
	names := make([]string, 0, len(pl.params))
	for _, p := range parameters.Sorted(pl.params) {
		names = append(names, p.Name)
	}
	known := "it declares no parameters"
	if len(names) > 0 {
		known = "its parameters are " + strings.Join(names, ", ")
	}
	for flag, m := range map[string]map[string]string{"parameter": pl.values.given, "ephemeral-parameter": pl.values.ephemeral, "parameter-default": pl.values.defaults} {
		for _, name := range slices.Sorted(maps.Keys(m)) {
			p, ok := declared[name]
			if !ok {
				return fmt.Errorf("--%s %s: the template declares no parameter %q; %s", flag, name, name, known)
			}
			if flag == "parameter" && p.Ephemeral {
				return fmt.Errorf("parameter %q is ephemeral (a build option): give it with --ephemeral-parameter %s=VALUE", name, name)
			}
		}
	}
	return nil
}

// interactive returns a prompter on the command's stdin and stdout when
// stdin is a terminal, else nil.
func (inv *invocation) interactive() *prompter {
	f, ok := inv.stdin.(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	return newPrompter(inv.stdin, inv.stdout)
}

// refusedError is coderd's refusal of a request, worded for people; it
// wraps the *codersdk.Error.
type refusedError struct {
	msg string
	err error
}

func (e *refusedError) Error() string { return e.msg }
func (e *refusedError) Unwrap() error { return e.err }

// explainRefusal words coderd's refusal of a build (a 4xx answer): every
// validation goes to stderr on a line of its own, naming the parameter
// (`parameter "cpu": value 9 is more than the maximum 8`), and the error
// returned carries coderd's message and what to do. Other errors are only
// prefixed with doing.
func (inv *invocation) explainRefusal(doing string, err error, params []codersdk.TemplateVersionParameter) error {
	var apiErr *codersdk.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode < 400 || apiErr.StatusCode >= 500 {
		return fmt.Errorf("%s: %w", doing, err)
	}
	declared := map[string]bool{}
	for _, p := range params {
		declared[p.Name] = true
	}
	for _, v := range apiErr.Validations {
		fmt.Fprintln(inv.stderr, validationLine(v, declared))
	}
	msg := apiErr.Message
	if apiErr.Detail != "" {
		msg += ": " + apiErr.Detail
	}
	msg = doing + ": " + msg
	switch len(apiErr.Validations) {
	case 0:
	case 1:
		msg += "; correct the value above (--parameter NAME=VALUE)"
	default:
		msg += "; correct the values above (--parameter NAME=VALUE)"
	}
	return &refusedError{msg: msg, err: err}
}

// validationLine words one validation of coderd's answer. coderd names a
// parameter by its name, or as rich_parameter_values.NAME.
func validationLine(v codersdk.ValidationError, declared map[string]bool) string {
	detail := strings.Join(strings.Fields(v.Detail), " ")
	name := v.Field
	for _, prefix := range []string{"rich_parameter_values.", "rich_parameter_values["} {
		name = strings.TrimSuffix(strings.TrimPrefix(name, prefix), "]")
	}
	switch {
	case declared[name] && strings.HasPrefix(detail, fmt.Sprintf("parameter %q", name)):
		return detail
	case declared[name]:
		return fmt.Sprintf("parameter %q: %s", name, detail)
	case v.Field == "" || v.Field == "rich_parameter_values":
		return detail
	}
	return v.Field + ": " + detail
}

// prompter asks questions on a terminal: it writes to out and reads one
// line per answer from in.
type prompter struct {
	in  *bufio.Reader
	out io.Writer
}

func newPrompter(in io.Reader, out io.Writer) *prompter {
	return &prompter{in: bufio.NewReader(in), out: out}
}

// readLine reads one answer without its line end.
func (pr *prompter) readLine() (string, error) {
	line, err := pr.in.ReadString('\n')
	if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
		if errors.Is(err, io.EOF) {
			err = errors.New("stdin closed before an answer")
		}
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// confirm asks a yes/no question; only yes (or y) is yes.
func (pr *prompter) confirm(question string) (bool, error) {
	fmt.Fprintf(pr.out, "%s (yes/no) ", question)
	line, err := pr.readLine()
	if err != nil {
		return false, err
	}
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "yes" || a == "y", nil
}
