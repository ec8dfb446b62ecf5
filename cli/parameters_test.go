package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

func int32p(v int32) *int32 { return &v }

// testParameters are the parameters of every kind a Coder template
// declares, as coderd hands them out.
func testParameters() []codersdk.TemplateVersionParameter {
	return []codersdk.TemplateVersionParameter{
		{Name: "tools", Type: codersdk.ParameterTypeListString, DefaultValue: `["git","make"]`, Mutable: true, Order: 5},
		{Name: "project", DisplayName: "Project", Description: "Lower-case project name;\nfixed for the workspace's life.",
			Type: codersdk.ParameterTypeString, Required: true, Order: 1,
			ValidationRegex: "^[a-z][a-z0-9-]*$", ValidationError: "project must be lower-case letters, digits and dashes"},
		{Name: "region", Type: codersdk.ParameterTypeString, DefaultValue: "eu", Mutable: true, Order: 2, Options: []codersdk.TemplateVersionParameterOption{
			{Name: "Europe", Value: "eu", Description: "Frankfurt"}, {Name: "United States", Value: "us"},
		}},
		{Name: "cpu", DisplayName: "CPU cores", Type: codersdk.ParameterTypeNumber, DefaultValue: "2", Mutable: true, Order: 3,
			ValidationMin: int32p(1), ValidationMax: int32p(8), ValidationMonotonic: "increasing"},
		{Name: "gpu", Type: codersdk.ParameterTypeBool, DefaultValue: "false", Mutable: true, Order: 4},
		{Name: "reset", DisplayName: "Reset home", Type: codersdk.ParameterTypeBool, DefaultValue: "false", Mutable: true, Ephemeral: true, Order: 6},
	}
}

// fakeTerminal is the person at the terminal: it watches what the CLI
// writes and types answers. The CLI side is the prompter it returns.
type fakeTerminal struct {
	t        *testing.T
	keyboard *io.PipeWriter
	mu       sync.Mutex
	screen   bytes.Buffer
	seen     int // how much of the screen expect has matched
}

func newFakeTerminal(t *testing.T) (*fakeTerminal, *prompter) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ft := &fakeTerminal{t: t, keyboard: inW}
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := outR.Read(buf)
			ft.mu.Lock()
			ft.screen.Write(buf[:n])
			ft.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		_ = outW.Close()
	})
	return ft, newPrompter(inR, outW)
}

// expect waits for want to show up on the screen after what earlier calls
// matched.
func (ft *fakeTerminal) expect(want string) {
	ft.t.Helper()
	testwait.For(ft.t, 5*time.Second, fmt.Sprintf("the terminal showing %q", want), func() (bool, string) {
		ft.mu.Lock()
		rest := ft.screen.String()[ft.seen:]
		ft.mu.Unlock()
		if i := strings.Index(rest, want); i >= 0 {
			ft.seen += i + len(want)
			return true, ""
		}
		return false, "after what was matched it shows:\n" + rest
	})
}

// answer types a line, as a person does after reading the question.
func (ft *fakeTerminal) answer(line string) {
	go func() { _, _ = ft.keyboard.Write([]byte(line + "\n")) }()
}

func (ft *fakeTerminal) String() string {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.screen.String()
}

// resolveAsync runs plan.resolve on the prompter and returns a function
// that waits for its result.
func resolveAsync(t *testing.T, plan parameterPlan, pr *prompter) func() (map[string]string, error) {
	type result struct {
		values []codersdk.WorkspaceBuildParameter
		err    error
	}
	done := make(chan result, 1)
	go func() {
		v, err := plan.resolve(pr)
		done <- result{v, err}
	}()
	return func() (map[string]string, error) {
		t.Helper()
		select {
		case r := <-done:
			return asMap(r.values), r.err
		case <-time.After(5 * time.Second):
			t.Fatal("resolve did not return within 5s")
			return nil, nil
		}
	}
}

func asMap(ps []codersdk.WorkspaceBuildParameter) map[string]string {
	m := map[string]string{}
	for _, p := range ps {
		m[p.Name] = p.Value
	}
	return m
}

func sameValues(t *testing.T, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("values: got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("values: got %v, want %v", got, want)
		}
	}
}

// TestCreatePrompts is coder create on a terminal: every parameter not
// given is asked for, in order, with its display name, description,
// numbered options and default; a value that breaks a rule is explained and
// asked again; ephemeral parameters are not asked.
func TestCreatePrompts(t *testing.T) {
	t.Parallel()
	term, pr := newFakeTerminal(t)
	wait := resolveAsync(t, parameterPlan{
		action: actionCreate, params: testParameters(),
		values: parameterValues{given: map[string]string{"cpu": "4"}},
	}, pr)

	term.expect("Project (project)\n  Lower-case project name;\n  fixed for the workspace's life.\nEnter a value: ")
	term.answer("Apollo")
	term.expect(`  project must be lower-case letters, digits and dashes (value "Apollo" does not match "^[a-z][a-z0-9-]*$")` + "\nEnter a value: ")
	term.answer("")
	term.expect("  a value is required\nEnter a value: ")
	term.answer("apollo")
	term.expect("region\n  1) Europe (eu) - Frankfurt\n  2) United States (us)\nChoose 1-2 [Europe]: ")
	term.answer("3")
	term.expect(`  "3" is not one of the choices: enter a number from 1 to 2` + "\nChoose 1-2 [Europe]: ")
	term.answer("2")
	term.expect("gpu\nEnter true or false [false]: ")
	term.answer("")
	term.expect("tools\nEnter values separated by commas (or a JSON list) [git, make]: ")
	term.answer("git, go")

	got, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	sameValues(t, got, map[string]string{"project": "apollo", "region": "us", "cpu": "4", "gpu": "false", "tools": `["git","go"]`})
	if s := term.String(); strings.Contains(s, "CPU cores") || strings.Contains(s, "Reset home") {
		t.Errorf("asked for a given or an ephemeral parameter:\n%s", s)
	}
}

// TestCreatePromptsNumberRules: the range shows in the question, and an
// answer outside it is refused with the rule.
func TestCreatePromptsNumberRules(t *testing.T) {
	t.Parallel()
	term, pr := newFakeTerminal(t)
	wait := resolveAsync(t, parameterPlan{
		action: actionCreate, params: testParameters(),
		values: parameterValues{given: map[string]string{"project": "apollo", "region": "eu", "gpu": "true", "tools": "[]"}},
	}, pr)
	term.expect("CPU cores (cpu)\nEnter a number from 1 to 8 [2]: ")
	term.answer("9")
	term.expect("  value 9 is more than the maximum 8\n")
	term.answer("lots")
	term.expect(`  value "lots" is not a number` + "\n")
	term.answer("8")
	got, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if got["cpu"] != "8" {
		t.Fatalf("cpu: got %q, want 8", got["cpu"])
	}
}

// TestPromptEphemeral: ephemeral parameters are asked only with
// --prompt-ephemeral-parameters, marked as build options.
func TestPromptEphemeral(t *testing.T) {
	t.Parallel()
	term, pr := newFakeTerminal(t)
	wait := resolveAsync(t, parameterPlan{
		action: actionCreate, params: testParameters(), promptEphemeral: true,
		values: parameterValues{given: map[string]string{"project": "apollo", "region": "eu", "cpu": "2", "gpu": "true", "tools": "[]"}},
	}, pr)
	term.expect("Reset home (reset) (build option)\nEnter true or false [false]: ")
	term.answer("yes")
	got, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if got["reset"] != "true" {
		t.Fatalf("reset: got %q, want true", got["reset"])
	}
}

// TestUpdatePrompts is coder update on a terminal: only parameters new in
// the active version, and ones whose current value is no longer an option,
// are asked for.
func TestUpdatePrompts(t *testing.T) {
	t.Parallel()
	params := append(testParameters(), codersdk.TemplateVersionParameter{
		Name: "disk", DisplayName: "Disk size", Type: codersdk.ParameterTypeNumber, Required: true, Mutable: true, Order: 7,
	})
	term, pr := newFakeTerminal(t)
	wait := resolveAsync(t, parameterPlan{
		action: actionUpdate, params: params,
		values:           parameterValues{given: map[string]string{"gpu": "true"}},
		previous:         map[string]string{"project": "apollo", "region": "ap", "cpu": "4", "gpu": "false", "tools": `["git"]`},
		previousDeclared: map[string]bool{"project": true, "region": true, "cpu": true, "gpu": true, "tools": true, "reset": true},
	}, pr)
	term.expect("region\n  1) Europe (eu) - Frankfurt\n  2) United States (us)\nChoose 1-2 [Europe]: ")
	term.answer("")
	term.expect("Disk size (disk)\nEnter a number: ")
	term.answer("20")
	got, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	sameValues(t, got, map[string]string{"region": "eu", "gpu": "true", "disk": "20"})
	for _, notAsked := range []string{"Project", "CPU cores", "tools"} {
		if strings.Contains(term.String(), notAsked) {
			t.Errorf("update asked for %s, which keeps its value:\n%s", notAsked, term)
		}
	}
}

// TestUpdateAlwaysPrompt: --always-prompt asks for every mutable parameter,
// offering its current value; immutable ones are named and kept.
func TestUpdateAlwaysPrompt(t *testing.T) {
	t.Parallel()
	term, pr := newFakeTerminal(t)
	wait := resolveAsync(t, parameterPlan{
		action: actionUpdate, params: testParameters(), alwaysPrompt: true,
		previous:         map[string]string{"project": "apollo", "region": "us", "cpu": "4", "gpu": "false", "tools": `["git"]`},
		previousDeclared: map[string]bool{"project": true, "region": true, "cpu": true, "gpu": true, "tools": true, "reset": true},
	}, pr)
	term.expect(`Parameter "project" is immutable: it keeps "apollo" for the workspace's life.` + "\n")
	term.expect("Choose 1-2 [United States]: ")
	term.answer("Europe")
	term.expect("Enter a number from 1 to 8 [4]: ")
	term.answer("3")
	term.expect("  parameter value '3' must be equal or greater than previous value: 4\n")
	term.answer("6")
	term.expect("Enter true or false [false]: ")
	term.answer("")
	term.expect("Enter values separated by commas (or a JSON list) [git]: ")
	term.answer(`["git","go"]`)
	got, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	sameValues(t, got, map[string]string{"region": "eu", "cpu": "6", "gpu": "false", "tools": `["git","go"]`})
}

// TestPromptStdinClosed: a terminal that goes away is an error naming the
// parameter, not a loop.
func TestPromptStdinClosed(t *testing.T) {
	t.Parallel()
	var screen bytes.Buffer
	_, err := parameterPlan{action: actionCreate, params: testParameters()}.resolve(newPrompter(strings.NewReader(""), &screen))
	if err == nil || !strings.Contains(err.Error(), `"project"`) {
		t.Fatalf("got %v, want an error naming project", err)
	}
}

// TestResolveWithoutTerminal covers what happens without anyone to ask,
// and with -y.
func TestResolveWithoutTerminal(t *testing.T) {
	t.Parallel()
	allDeclared := map[string]bool{"project": true, "region": true, "cpu": true, "gpu": true, "tools": true, "reset": true}
	tests := []struct {
		name    string
		plan    parameterPlan
		want    map[string]string
		wantErr []string
	}{
		{
			name: "CreateGivenOnly",
			plan: parameterPlan{action: actionCreate, values: parameterValues{given: map[string]string{"project": "apollo", "cpu": "4"}}},
			want: map[string]string{"project": "apollo", "cpu": "4"},
		},
		{
			name:    "CreateMissingRequired",
			plan:    parameterPlan{action: actionCreate, values: parameterValues{given: map[string]string{"cpu": "4"}}},
			wantErr: []string{`required parameter "project"`, "--parameter NAME=VALUE", "--rich-parameter-file", "not a terminal"},
		},
		{
			name: "CreateYesTakesDefaults",
			plan: parameterPlan{action: actionCreate, useDefaults: true, values: parameterValues{given: map[string]string{"project": "apollo"}}},
			want: map[string]string{"project": "apollo", "region": "eu", "cpu": "2", "gpu": "false", "tools": `["git","make"]`},
		},
		{
			name:    "CreateYesNamesRequiredWithoutDefault",
			plan:    parameterPlan{action: actionCreate, useDefaults: true},
			wantErr: []string{"-y", `"project"`, "--parameter NAME=VALUE"},
		},
		{
			name: "ParameterDefaultFlag",
			plan: parameterPlan{action: actionCreate, values: parameterValues{defaults: map[string]string{"project": "zeus"}}},
			want: map[string]string{"project": "zeus"},
		},
		{
			name: "EphemeralFlag",
			plan: parameterPlan{action: actionCreate, values: parameterValues{given: map[string]string{"project": "a"}, ephemeral: map[string]string{"reset": "true"}}},
			want: map[string]string{"project": "a", "reset": "true"},
		},
		{
			name:    "EphemeralByParameterFlag",
			plan:    parameterPlan{action: actionCreate, values: parameterValues{given: map[string]string{"project": "a", "reset": "true"}}},
			wantErr: []string{`"reset"`, "ephemeral", "--ephemeral-parameter reset=VALUE"},
		},
		{
			name:    "UnknownName",
			plan:    parameterPlan{action: actionCreate, values: parameterValues{given: map[string]string{"project": "a", "cpus": "4"}}},
			wantErr: []string{`"cpus"`, "project, region, cpu, gpu, tools, reset"},
		},
		{
			name: "UpdateKeepsTheRest",
			plan: parameterPlan{action: actionUpdate, previousDeclared: allDeclared,
				previous: map[string]string{"project": "apollo", "region": "eu", "cpu": "4"},
				values:   parameterValues{given: map[string]string{"cpu": "6"}}},
			want: map[string]string{"cpu": "6"},
		},
		{
			name: "UpdateNewRequired",
			plan: parameterPlan{action: actionUpdate, previousDeclared: map[string]bool{"region": true, "cpu": true, "gpu": true, "tools": true},
				previous: map[string]string{"region": "eu", "cpu": "4"}},
			wantErr: []string{`required parameter "project"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.plan.params = testParameters()
			got, err := tt.plan.resolve(nil)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("got values %v, want an error", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sameValues(t, asMap(got), tt.want)
		})
	}
}

// TestYesOnTerminalSaysWhichDefaults: -y on a terminal tells which defaults
// it took.
func TestYesOnTerminalSaysWhichDefaults(t *testing.T) {
	t.Parallel()
	var screen bytes.Buffer
	_, err := parameterPlan{action: actionCreate, params: testParameters(), useDefaults: true,
		values: parameterValues{given: map[string]string{"project": "apollo"}}}.resolve(newPrompter(strings.NewReader(""), &screen))
	if err != nil {
		t.Fatal(err)
	}
	if want := `Using the default value for cpu: "2"`; !strings.Contains(screen.String(), want) {
		t.Fatalf("screen: got\n%s\nwant %q", &screen, want)
	}
}

func TestReadValuesFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		maps       bool
		want       map[string]string
		wantErr    string
	}{
		{name: "Scalars", yaml: "cpu: 4\nversion: 08\nratio: 1.10\ngpu: true\nname: apollo\nempty:\n",
			want: map[string]string{"cpu": "4", "version": "08", "ratio": "1.10", "gpu": "true", "name": "apollo", "empty": ""}},
		{name: "YAMLList", yaml: "tools:\n  - git\n  - go\n", want: map[string]string{"tools": `["git","go"]`}},
		{name: "JSONString", yaml: "tools: '[\"git\",\"go\"]'\n", want: map[string]string{"tools": `["git","go"]`}},
		{name: "Empty", yaml: "", want: map[string]string{}},
		{name: "NotAMap", yaml: "- a\n- b\n", wantErr: "line 1: want a map"},
		{name: "NestedMap", yaml: "cpu:\n  a: 1\n", wantErr: "line 2: cpu: want a value or a list"},
		{name: "Duplicate", yaml: "cpu: 1\ncpu: 2\n", wantErr: "cpu is given twice"},
		{name: "MapVariable", yaml: "labels:\n  team: infra\n", maps: true, want: map[string]string{"labels": `{"team":"infra"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := readValuesFile(path, tt.maps)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want an error saying %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sameValues(t, got, tt.want)
		})
	}
}

// TestFlagsOverrideFile: --parameter wins over --rich-parameter-file, and
// the last of a repeated --parameter wins (as in Coder's CLI).
func TestFlagsOverrideFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "params.yaml")
	if err := os.WriteFile(path, []byte("cpu: 2\nregion: us\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := (&parameterFlags{file: path, values: []string{"cpu=4", "project=a", "project=b"}}).parse()
	if err != nil {
		t.Fatal(err)
	}
	sameValues(t, v.given, map[string]string{"cpu": "4", "region": "us", "project": "b"})

	_, err = (&parameterFlags{file: filepath.Join(t.TempDir(), "missing.yaml")}).parse()
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--rich-parameter-file") {
		t.Fatalf("missing file: got %v, want a usage error naming --rich-parameter-file", err)
	}
}

// TestExplainRefusal renders coderd's 400 answer (a recorded body): one
// line per validation naming the parameter, and one error with coderd's
// message and what to do.
func TestExplainRefusal(t *testing.T) {
	t.Parallel()
	body := `{"message":"Validation failed","validations":[` +
		`{"field":"cpu","detail":"value 9 is more than the maximum 8"},` +
		`{"field":"rich_parameter_values.region","detail":"\"mars\" is not one of the options"},` +
		`{"field":"project","detail":"parameter \"project\" is immutable"},` +
		`{"field":"rich_parameter_values","detail":"the template declares no parameter \"cpus\""},` +
		`{"field":"name","detail":"must be at most 32 characters"}]}`
	req, _ := http.NewRequest(http.MethodPost, "http://coder.example/api/v2/users/me/workspaces", nil)
	resp := &http.Response{StatusCode: http.StatusBadRequest, Body: io.NopCloser(strings.NewReader(body)), Request: req}
	apiErr := codersdk.ReadBodyAsError(resp)

	var stderr bytes.Buffer
	inv := &invocation{stderr: &stderr}
	err := inv.explainRefusal("create workspace dev", apiErr, testParameters())
	wantLines := []string{
		`parameter "cpu": value 9 is more than the maximum 8`,
		`parameter "region": "mars" is not one of the options`,
		`parameter "project" is immutable`,
		`the template declares no parameter "cpus"`,
		`name: must be at most 32 characters`,
	}
	if got := strings.Split(strings.TrimSpace(stderr.String()), "\n"); strings.Join(got, "\n") != strings.Join(wantLines, "\n") {
		t.Errorf("stderr lines:\ngot:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
	}
	if want := "create workspace dev: Validation failed; correct the values above (--parameter NAME=VALUE)"; err == nil || err.Error() != want {
		t.Errorf("error: got %v, want %q", err, want)
	}
	if !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Error("the error does not wrap coderd's answer")
	}

	// A refusal without validations is coderd's message and detail, with
	// no request URL.
	resp = &http.Response{StatusCode: http.StatusBadRequest, Request: req,
		Body: io.NopCloser(strings.NewReader(`{"message":"Parameter \"project\" is immutable","detail":"it was \"apollo\""}`))}
	stderr.Reset()
	err = inv.explainRefusal("update workspace dev", codersdk.ReadBodyAsError(resp), testParameters())
	if want := `update workspace dev: Parameter "project" is immutable: it was "apollo"`; err == nil || err.Error() != want || stderr.Len() != 0 {
		t.Errorf("got %v and stderr %q, want %q and nothing on stderr", err, &stderr, want)
	}
}
