package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"airgapcoder/cli"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
)

func int32p(v int32) *int32 { return &v }

// paramsV1 are the parameters of the first version of the "params"
// template: one of each kind Coder templates declare.
var paramsV1 = []codersdk.TemplateVersionParameter{
	{Name: "project", DisplayName: "Project", Description: "Lower-case project name.", Type: codersdk.ParameterTypeString, Required: true, Order: 1,
		ValidationRegex: "^[a-z]+$", ValidationError: "project must be lower-case letters"},
	{Name: "region", Type: codersdk.ParameterTypeString, DefaultValue: "eu", Mutable: true, Order: 2, Options: []codersdk.TemplateVersionParameterOption{
		{Name: "Europe", Value: "eu"}, {Name: "United States", Value: "us"},
	}},
	{Name: "cpu", DisplayName: "CPU cores", Type: codersdk.ParameterTypeNumber, DefaultValue: "2", Mutable: true, Order: 3,
		ValidationMin: int32p(1), ValidationMax: int32p(8)},
	{Name: "gpu", Type: codersdk.ParameterTypeBool, DefaultValue: "false", Mutable: true, Order: 4},
	{Name: "tools", Type: codersdk.ParameterTypeListString, DefaultValue: `["git","make"]`, Mutable: true, Order: 5},
}

// paramsV2 adds a required parameter and an ephemeral one.
var paramsV2 = append(append([]codersdk.TemplateVersionParameter{}, paramsV1...),
	codersdk.TemplateVersionParameter{Name: "disk", DisplayName: "Disk size", Type: codersdk.ParameterTypeNumber, Required: true, Mutable: true, Order: 6},
	codersdk.TemplateVersionParameter{Name: "reset", Type: codersdk.ParameterTypeBool, DefaultValue: "false", Mutable: true, Ephemeral: true, Order: 7},
)

// paramsDeployment is a real coderd with the test as its provisioner
// daemon, and an owner for the CLI to act as.
type paramsDeployment struct {
	d      *coderdtest.Deployment
	admin  *codersdk.Client
	daemon *coderdtest.Daemon
}

func newParamsDeployment(t *testing.T) *paramsDeployment {
	t.Helper()
	const psk = "params-psk"
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: psk})
	admin, _ := d.CreateFirstUser(t)
	c := d.Client()
	c.ProvisionerPSK = psk
	return &paramsDeployment{d: d, admin: admin, daemon: coderdtest.NewDaemon(t, c, "params-daemon", nil)}
}

// importVersion uploads a template version (into templateID, or none yet)
// whose import finds params.
func (p *paramsDeployment) importVersion(t *testing.T, templateID string, params []codersdk.TemplateVersionParameter) codersdk.TemplateVersion {
	t.Helper()
	v := coderdtest.UploadVersion(t, p.admin, templateID, coderdtest.MinimalTemplate, nil)
	j := p.daemon.Acquire(t, 20*time.Second)
	if j == nil || j.Type != codersdk.ProvisionerJobTypeTemplateVersionImport {
		t.Fatalf("import job: got %+v, want a template version import", j)
	}
	p.daemon.Complete(t, j.JobID, codersdk.CompleteJobRequest{Parameters: params})
	return v
}

// createTemplate makes the "params" template with paramsV1.
func (p *paramsDeployment) createTemplate(t *testing.T) codersdk.Template {
	t.Helper()
	v := p.importVersion(t, "", paramsV1)
	tpl, err := p.admin.CreateTemplate(context.Background(), "default", codersdk.CreateTemplateRequest{Name: "params", TemplateVersionID: v.ID})
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// build completes the workspace build r queues and returns its job.
func (p *paramsDeployment) build(t *testing.T, r *cliRun) *codersdk.AcquiredJob {
	t.Helper()
	j := p.daemon.Acquire(t, 20*time.Second)
	if j == nil || j.Type != codersdk.ProvisionerJobTypeWorkspaceBuild {
		select {
		case code := <-r.done:
			t.Fatalf("coder %s queued no build: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args[:2], " "), code, r.stdout, r.stderr)
		default:
		}
		t.Fatalf("build job: got %+v, want a workspace build", j)
	}
	p.daemon.Complete(t, j.JobID, codersdk.CompleteJobRequest{State: fmt.Appendf(nil, `{"build":%d}`, j.BuildNumber)})
	return j
}

// noBuild checks that no build was queued.
func (p *paramsDeployment) noBuild(t *testing.T) {
	t.Helper()
	if j := p.daemon.Acquire(t, 500*time.Millisecond); j != nil {
		t.Fatalf("a %s job was queued (%s of %s), want none", j.Type, j.Transition, j.WorkspaceName)
	}
}

// cliRun is one cli.Main run in this process.
type cliRun struct {
	args           []string
	stdout, stderr *syncbuf.Buffer
	done           chan int
}

// runCLI runs the CLI against the deployment as its owner, in the
// background.
func (p *paramsDeployment) runCLI(t *testing.T, stdin io.Reader, args ...string) *cliRun {
	t.Helper()
	args = append(args, "--url", p.d.URL.String(), "--token", p.admin.SessionToken, "--global-config", t.TempDir())
	r := &cliRun{args: args, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, done: make(chan int, 1)}
	go func() { r.done <- cli.Main(args, stdin, r.stdout, r.stderr) }()
	return r
}

func (r *cliRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-r.done:
		return code
	case <-time.After(time.Minute):
		t.Fatalf("coder %s did not return within a minute\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.stdout, r.stderr)
		return -1
	}
}

// mustSucceed waits for the run and wants exit 0.
func (r *cliRun) mustSucceed(t *testing.T) {
	t.Helper()
	if code := r.wait(t); code != 0 {
		t.Fatalf("coder %s: exit %d, want 0\nstdout: %s\nstderr: %s", strings.Join(r.args[:2], " "), code, r.stdout, r.stderr)
	}
}

// mustFail waits for the run, wants exit 1 and one error line saying each
// of wants, and returns stderr.
func (r *cliRun) mustFail(t *testing.T, wants ...string) string {
	t.Helper()
	code := r.wait(t)
	stderr := r.stderr.String()
	if code != 1 {
		t.Fatalf("coder %s: exit %d, want 1\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), code, r.stdout, stderr)
	}
	var errLines []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "error: ") {
			errLines = append(errLines, l)
		}
	}
	if len(errLines) != 1 {
		t.Fatalf("stderr: got %d error lines, want 1:\n%s", len(errLines), stderr)
	}
	for _, w := range wants {
		if !strings.Contains(stderr, w) {
			t.Errorf("coder %s: stderr does not say %q:\n%s", strings.Join(r.args[:2], " "), w, stderr)
		}
	}
	return stderr
}

func paramMap(ps []codersdk.WorkspaceBuildParameter) map[string]string {
	m := map[string]string{}
	for _, p := range ps {
		m[p.Name] = p.Value
	}
	return m
}

// wantParams checks that got has every name=value of want.
func wantParams(t *testing.T, what string, got []codersdk.WorkspaceBuildParameter, want map[string]string) {
	t.Helper()
	m := paramMap(got)
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s: %s got %q, want %q (all: %v)", what, k, m[k], v, m)
		}
	}
}

// TestCreateAndUpdateWithParameters runs coder create and coder update
// (without a terminal) against a real coderd: the values of --parameter
// and --rich-parameter-file reach the build, flags win over the file, a
// missing required parameter is named before anything is created, and an
// update changes only what it is given, prompting nothing.
func TestCreateAndUpdateWithParameters(t *testing.T) {
	t.Parallel()
	p := newParamsDeployment(t)
	tpl := p.createTemplate(t)
	ctx := context.Background()

	file := filepath.Join(t.TempDir(), "params.yaml")
	if err := os.WriteFile(file, []byte("cpu: 2\nregion: us\ntools:\n  - git\n  - go\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("MissingRequired", func(t *testing.T) {
		p.runCLI(t, strings.NewReader(""), "create", "nope", "--template", "params", "--parameter", "cpu=4").
			mustFail(t, `required parameter "project"`, "--parameter NAME=VALUE")
		p.noBuild(t)
		if ws, err := p.admin.Workspaces(ctx, codersdk.WorkspaceFilter{Name: "nope"}); err != nil || ws.Count != 0 {
			t.Fatalf("workspaces named nope: got %d (%v), want none", ws.Count, err)
		}
	})
	t.Run("UnknownParameter", func(t *testing.T) {
		p.runCLI(t, strings.NewReader(""), "create", "nope", "--template", "params", "--parameter", "project=a", "--parameter", "cpus=4").
			mustFail(t, `no parameter "cpus"`, "project, region, cpu, gpu, tools")
		p.noBuild(t)
	})
	t.Run("BadFile", func(t *testing.T) {
		r := p.runCLI(t, strings.NewReader(""), "create", "nope", "--template", "params", "--rich-parameter-file", file+".missing")
		if code := r.wait(t); code != 2 || !strings.Contains(r.stderr.String(), "--rich-parameter-file") {
			t.Fatalf("a missing --rich-parameter-file: exit %d, want 2 naming the flag\n%s", code, r.stderr)
		}
	})

	// --parameter cpu=4 wins over the file's cpu: 2.
	r := p.runCLI(t, strings.NewReader(""), "create", "dev", "--template", "params",
		"--rich-parameter-file", file, "--parameter", "project=apollo", "--parameter", "cpu=4")
	job := p.build(t, r)
	r.mustSucceed(t)
	wantParams(t, "create's build job", job.RichParameterValues, map[string]string{
		"project": "apollo", "cpu": "4", "region": "us", "tools": `["git","go"]`, "gpu": "false",
	})
	if job.TemplateVersionID != tpl.ActiveVersionID {
		t.Errorf("create built version %s, want the active %s", job.TemplateVersionID, tpl.ActiveVersionID)
	}
	if out := r.stdout.String(); !strings.Contains(out, "Workspace dev created and running.") || strings.Contains(out, "Enter") {
		t.Errorf("create stdout: got %q, want the created line and no question", out)
	}
	w, err := p.admin.WorkspaceByOwnerAndName(ctx, codersdk.Me, "dev")
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.admin.WorkspaceBuild(ctx, w.LatestBuild.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantParams(t, "dev's build", b.RichParameterValues, map[string]string{"project": "apollo", "cpu": "4", "region": "us"})

	// coder show prints the build's values.
	r = p.runCLI(t, strings.NewReader(""), "show", "dev")
	r.mustSucceed(t)
	for _, want := range []string{"Parameters:\n", "  project: apollo\n", "  cpu: 4\n", `  tools: ["git","go"]` + "\n"} {
		if !strings.Contains(r.stdout.String(), want) {
			t.Errorf("coder show dev does not print %q:\n%s", want, r.stdout)
		}
	}

	t.Run("UpToDate", func(t *testing.T) {
		r := p.runCLI(t, strings.NewReader(""), "update", "dev")
		r.mustSucceed(t)
		if !strings.Contains(r.stdout.String(), "Workspace dev is up to date") {
			t.Errorf("update of an up-to-date workspace: got %q", r.stdout)
		}
		p.noBuild(t)
	})

	// update changes cpu only; the rest keep their values.
	r = p.runCLI(t, strings.NewReader(""), "update", "dev", "--parameter", "cpu=6")
	job = p.build(t, r)
	r.mustSucceed(t)
	if job.Transition != codersdk.WorkspaceTransitionStart || job.TemplateVersionID != tpl.ActiveVersionID {
		t.Errorf("update's build: %s of version %s, want start of %s", job.Transition, job.TemplateVersionID, tpl.ActiveVersionID)
	}
	wantParams(t, "update's build job", job.RichParameterValues, map[string]string{"project": "apollo", "cpu": "6", "region": "us", "tools": `["git","go"]`})

	// A new version with a new required parameter: update names it, then
	// builds the new version with it.
	v2 := p.importVersion(t, tpl.ID, paramsV2)
	if err := p.admin.UpdateActiveTemplateVersion(ctx, tpl.ID, codersdk.UpdateActiveTemplateVersion{ID: v2.ID}); err != nil {
		t.Fatal(err)
	}
	p.runCLI(t, strings.NewReader(""), "update", "dev").mustFail(t, `required parameter "disk"`, "--parameter NAME=VALUE")
	p.noBuild(t)
	p.runCLI(t, strings.NewReader(""), "update", "dev", "-y").mustFail(t, "-y", `"disk"`)
	p.noBuild(t)

	r = p.runCLI(t, strings.NewReader(""), "update", "dev", "--parameter", "disk=20", "--ephemeral-parameter", "reset=true")
	job = p.build(t, r)
	r.mustSucceed(t)
	if job.TemplateVersionID != v2.ID {
		t.Errorf("update built version %s, want the new active %s", job.TemplateVersionID, v2.ID)
	}
	wantParams(t, "update to v2", job.RichParameterValues, map[string]string{"disk": "20", "reset": "true", "cpu": "6", "project": "apollo"})
	if !strings.Contains(r.stdout.String(), "Workspace dev updated to version "+v2.Name) {
		t.Errorf("update stdout: got %q, want it to name version %s", r.stdout, v2.Name)
	}

	p.runCLI(t, strings.NewReader(""), "update", "dev", "--parameter", "reset=true").
		mustFail(t, `"reset" is ephemeral`, "--ephemeral-parameter reset=VALUE")
	p.noBuild(t)
}

// fakeCoderd answers the calls coder create makes with recorded bodies,
// recording the create request; it stands in for coderd's validation of
// values, which lives in coderd.
type fakeCoderd struct {
	mu      sync.Mutex
	created []byte
}

func (f *fakeCoderd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v2/organizations/default/templates/params":
		_, _ = io.WriteString(w, `{"id":"t1","name":"params","active_version_id":"v1"}`)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v2/templateversions/v1":
		b, _ := json.Marshal(codersdk.TemplateVersion{ID: "v1", Name: "v1", Parameters: paramsV1})
		_, _ = w.Write(b)
	case r.Method == http.MethodPost && r.URL.Path == "/api/v2/users/me/workspaces":
		f.mu.Lock()
		f.created, _ = io.ReadAll(r.Body)
		f.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"message":"Validation failed","validations":[`+
			`{"field":"cpu","detail":"value 9 is more than the maximum 8"},`+
			`{"field":"region","detail":"value \"mars\" is not one of the options"}]}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"message":"not found"}`)
	}
}

// TestCreateRefusedByCoderd: what coder create sends, and how it words a
// 400 with validations: one line per validation naming the parameter, one
// error line, exit 1.
func TestCreateRefusedByCoderd(t *testing.T) {
	t.Parallel()
	fake := &fakeCoderd{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	var stdout, stderr bytes.Buffer
	code := cli.Main([]string{"create", "dev", "--template", "params", "--url", srv.URL, "--token", "t", "--global-config", t.TempDir(),
		"--parameter", "project=apollo", "--parameter", "cpu=9", "--parameter", "region=mars", "--parameter", `tools=["git"]`},
		strings.NewReader(""), &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstderr: %s", code, &stderr)
	}
	want := `parameter "cpu": value 9 is more than the maximum 8
parameter "region": value "mars" is not one of the options
error: create workspace dev: Validation failed; correct the values above (--parameter NAME=VALUE)
`
	if stderr.String() != want {
		t.Errorf("stderr:\ngot:\n%s\nwant:\n%s", &stderr, want)
	}

	var req codersdk.CreateWorkspaceRequest
	fake.mu.Lock()
	err := json.Unmarshal(fake.created, &req)
	fake.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if req.Name != "dev" || req.TemplateVersionID != "v1" || req.TemplateID != "" {
		t.Errorf("request: got name %q, version %q, template %q; want dev, version v1 and no template id", req.Name, req.TemplateVersionID, req.TemplateID)
	}
	got, _ := json.Marshal(req.RichParameterValues)
	if want := `[{"name":"project","value":"apollo"},{"name":"region","value":"mars"},{"name":"cpu","value":"9"},{"name":"tools","value":"[\"git\"]"}]`; string(got) != want {
		t.Errorf("rich_parameter_values: got %s, want %s (the given values only, in the template's order)", got, want)
	}
}

// TestTemplatePushVariables: --variables-file and --variable (which wins)
// reach coderd as the version's user_variable_values.
func TestTemplatePushVariables(t *testing.T) {
	t.Parallel()
	p := newParamsDeployment(t)
	var mu sync.Mutex
	var sent []codersdk.CreateTemplateVersionRequest
	proxy := httputil.NewSingleHostReverseProxy(p.d.URL)
	proxy.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/templateversions") {
			b, _ := io.ReadAll(r.Body)
			var req codersdk.CreateTemplateVersionRequest
			_ = json.Unmarshal(b, &req)
			mu.Lock()
			sent = append(sent, req)
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(coderdtest.MinimalTemplate["main.tf"]), 0o644); err != nil {
		t.Fatal(err)
	}
	vars := filepath.Join(t.TempDir(), "vars.yaml")
	if err := os.WriteFile(vars, []byte("image: ubuntu:22.04\nreplicas: 2\nlabels:\n  team: infra\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main([]string{"templates", "create", "vars", "--directory", dir, "--variables-file", vars, "--variable", "replicas=3", "--var", "zone=a",
			"--url", srv.URL, "--token", p.admin.SessionToken, "--global-config", t.TempDir()}, strings.NewReader(""), &stdout, &stderr)
	}()
	j := p.daemon.Acquire(t, 20*time.Second)
	if j == nil {
		t.Fatal("no import job")
	}
	p.daemon.Complete(t, j.JobID, codersdk.CompleteJobRequest{})
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("templates create: exit %d\nstderr: %s", code, &stderr)
		}
	case <-time.After(time.Minute):
		t.Fatal("templates create did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 1 {
		t.Fatalf("template version requests: got %d, want 1", len(sent))
	}
	got, _ := json.Marshal(sent[0].UserVariableValues)
	want := `[{"name":"image","value":"ubuntu:22.04"},{"name":"labels","value":"{\"team\":\"infra\"}"},{"name":"replicas","value":"3"},{"name":"zone","value":"a"}]`
	if string(got) != want {
		t.Errorf("user_variable_values: got %s, want %s", got, want)
	}
}

// TestParameterUsageErrors: mistakes in the parameter and variable flags
// are usage errors (exit 2) naming the flag, found before any request.
func TestParameterUsageErrors(t *testing.T) {
	t.Parallel()
	dead := "http://" + freeAddr(t) // nobody listens here
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	notMap := filepath.Join(t.TempDir(), "list.yaml")
	if err := os.WriteFile(notMap, []byte("- cpu\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{name: "UpdateHelp", args: []string{"update", "--help"}, code: 0},
		{name: "UpdateMissingArg", args: []string{"update"}, code: 2, want: []string{"NAME"}},
		{name: "BadParameter", args: []string{"update", "dev", "--parameter", "cpu"}, code: 2, want: []string{"--parameter", `"cpu"`}},
		{name: "BadEphemeral", args: []string{"create", "dev", "-t", "t", "--ephemeral-parameter", "=1"}, code: 2, want: []string{"--ephemeral-parameter"}},
		{name: "MissingFile", args: []string{"create", "dev", "-t", "t", "--rich-parameter-file", missing}, code: 2, want: []string{"--rich-parameter-file", missing}},
		{name: "FileNotAMap", args: []string{"update", "dev", "--rich-parameter-file", notMap}, code: 2, want: []string{"--rich-parameter-file", "line 1"}},
		{name: "BadVariable", args: []string{"templates", "push", "t", "--directory", ".", "--variable", "novalue"}, code: 2, want: []string{"--variable", "novalue"}},
		{name: "MissingVariablesFile", args: []string{"templates", "create", "t", "--directory", ".", "--variables-file", missing}, code: 2, want: []string{"--variables-file"}},
		{name: "AlwaysPromptOnlyOnUpdate", args: []string{"create", "dev", "-t", "t", "--always-prompt"}, code: 2, want: []string{"--always-prompt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			args := append(tt.args, "--url", dead, "--token", "x", "--global-config", t.TempDir())
			if code := cli.Main(args, strings.NewReader(""), &stdout, &stderr); code != tt.code {
				t.Fatalf("coder %s: exit %d, want %d\nstderr: %s", strings.Join(tt.args, " "), code, tt.code, &stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr does not name %q:\n%s", w, &stderr)
				}
			}
		})
	}
}
