package provider

import (
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-exec/tfexec"
)

// These tests run the real terraform with the real provider binary, built
// once and installed from a filesystem mirror that package mirror lays out.

// template uses every resource and data source; providerBlock is inserted
// as is.
func template(providerBlock string) string {
	return `terraform {
  required_providers {
    coder = {
      source  = "coder.internal/appliance/coder"
      version = "` + testVersion + `"
    }
  }
}

variable "startup_script" {
  type    = string
  default = "echo one"
}

` + providerBlock + `

data "coder_workspace" "me" {}
data "coder_provisioner" "me" {}

resource "coder_agent" "main" {
  os             = data.coder_provisioner.me.os
  arch           = data.coder_provisioner.me.arch
  dir            = "/home/coder"
  env            = { GREETING = "hello" }
  startup_script = var.startup_script
}

resource "coder_app" "code" {
  agent_id     = coder_agent.main.id
  slug         = "code-server"
  display_name = "VS Code"
  port         = 13337
}

resource "coder_app" "docs" {
  count    = data.coder_workspace.me.start_count
  agent_id = coder_agent.main.id
  slug     = "docs"
  url      = "http://localhost:8000/docs"
  share    = "authenticated"
}

output "workspace" {
  value = data.coder_workspace.me
}

output "provisioner" {
  value = data.coder_provisioner.me
}

output "init_script" {
  value = coder_agent.main.init_script
}

output "token" {
  value     = coder_agent.main.token
  sensitive = true
}
`
}

type workspaceOutput struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Owner        string `json:"owner"`
	OwnerID      string `json:"owner_id"`
	Transition   string `json:"transition"`
	StartCount   int    `json:"start_count"`
	AccessURL    string `json:"access_url"`
	TemplateName string `json:"template_name"`
}

type provisionerOutput struct {
	ID   string            `json:"id"`
	OS   string            `json:"os"`
	Arch string            `json:"arch"`
	Tags map[string]string `json:"tags"`
}

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestApplyFromEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		EnvURL:                   "https://coder.example.test",
		EnvWorkspaceID:           "11111111-1111-1111-1111-111111111111",
		EnvWorkspaceName:         "dev",
		EnvWorkspaceOwner:        "alice",
		EnvWorkspaceOwnerID:      "22222222-2222-2222-2222-222222222222",
		EnvWorkspaceTransition:   "start",
		EnvWorkspaceTemplateName: "docker",
		EnvProvisionerOS:         "linux",
		EnvProvisionerArch:       "arm64",
		EnvProvisionerTags:       `{"scope":"organization","owner":""}`,
	}
	d := newTFDir(t, template(""), env)
	d.apply()

	var ws workspaceOutput
	d.output("workspace", &ws)
	wantWS := workspaceOutput{
		ID: env[EnvWorkspaceID], Name: "dev", Owner: "alice", OwnerID: env[EnvWorkspaceOwnerID],
		Transition: "start", StartCount: 1, AccessURL: "https://coder.example.test", TemplateName: "docker",
	}
	if ws != wantWS {
		t.Errorf("coder_workspace: got %+v, want %+v", ws, wantWS)
	}
	var prov provisionerOutput
	d.output("provisioner", &prov)
	if prov.OS != "linux" || prov.Arch != "arm64" || !reflect.DeepEqual(prov.Tags, map[string]string{"scope": "organization", "owner": ""}) || !uuidPattern.MatchString(prov.ID) {
		t.Errorf("coder_provisioner: got %+v", prov)
	}

	st := d.show()
	agent := stateResource(t, st, "coder_agent.main")
	for _, k := range []string{"id", "token"} {
		if s, _ := agent[k].(string); !uuidPattern.MatchString(s) {
			t.Errorf("coder_agent.%s: got %q, want a UUID", k, s)
		}
	}
	if fmt.Sprint(agent["connection_timeout"]) != "120" {
		t.Errorf("connection_timeout: got %v, want the default 120", agent["connection_timeout"])
	}
	if !reflect.DeepEqual(agent["env"], map[string]any{"GREETING": "hello"}) || agent["dir"] != "/home/coder" {
		t.Errorf("env, dir: got %v, %v", agent["env"], agent["dir"])
	}
	script, _ := agent["init_script"].(string)
	if !strings.Contains(script, "https://coder.example.test/bin/coder-linux-arm64") {
		t.Errorf("init_script lacks the download URL:\n%s", script)
	}
	if strings.Contains(script, "SSL_CERT_FILE") || strings.Contains(script, agent["token"].(string)) {
		t.Errorf("init_script has a CA or the token though it should not:\n%s", script)
	}
	for _, r := range st.Values.RootModule.Resources {
		if r.Address == "coder_agent.main" && !strings.Contains(string(r.SensitiveValues), `"token":true`) {
			t.Errorf("token is not marked sensitive: %s", r.SensitiveValues)
		}
	}

	code := stateResource(t, st, "coder_app.code")
	if code["agent_id"] != agent["id"] || code["share"] != "owner" || fmt.Sprint(code["port"]) != "13337" ||
		code["url"] != nil || code["display_name"] != "VS Code" || !uuidPattern.MatchString(code["id"].(string)) {
		t.Errorf("coder_app.code: got %v", code)
	}
	docs := stateResource(t, st, "coder_app.docs[0]")
	if docs["share"] != "authenticated" || docs["url"] != "http://localhost:8000/docs" || docs["port"] != nil {
		t.Errorf("coder_app.docs: got %v", docs)
	}
}

func TestStopTransition(t *testing.T) {
	t.Parallel()
	d := newTFDir(t, template(""), map[string]string{EnvURL: "https://coder.example.test", EnvWorkspaceTransition: "stop"})
	d.apply()
	var ws workspaceOutput
	d.output("workspace", &ws)
	if ws.Transition != "stop" || ws.StartCount != 0 {
		t.Errorf("transition %q, start_count %d: want stop, 0", ws.Transition, ws.StartCount)
	}
	for _, r := range d.show().Values.RootModule.Resources {
		if strings.HasPrefix(r.Address, "coder_app.docs") {
			t.Errorf("%s exists though its count is start_count = 0", r.Address)
		}
	}
}

func TestDefaultsAndProviderURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		providerBlock string
		env           map[string]string
		wantURL       string
	}{
		{name: "no environment", wantURL: DefaultURL},
		{
			name:          "provider url overrides CODER_URL",
			providerBlock: "provider \"coder\" {\n  url = \"https://override.example.test/\"\n}",
			env:           map[string]string{EnvURL: "https://env.example.test"},
			wantURL:       "https://override.example.test",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := newTFDir(t, template(tt.providerBlock), tt.env)
			d.apply()
			var ws workspaceOutput
			d.output("workspace", &ws)
			want := workspaceOutput{
				ID: nilUUID, Name: "default", Owner: "default", OwnerID: nilUUID,
				Transition: "start", StartCount: 1, AccessURL: tt.wantURL, TemplateName: "default",
			}
			if ws != want {
				t.Errorf("coder_workspace: got %+v, want %+v", ws, want)
			}
			var prov provisionerOutput
			d.output("provisioner", &prov)
			if prov.OS != runtime.GOOS || prov.Arch != runtime.GOARCH || len(prov.Tags) != 0 {
				t.Errorf("coder_provisioner: got %+v, want %s/%s and no tags", prov, runtime.GOOS, runtime.GOARCH)
			}
			var script string
			d.output("init_script", &script)
			if want := fmt.Sprintf("%s/bin/coder-%s-%s", tt.wantURL, runtime.GOOS, runtime.GOARCH); !strings.Contains(script, want) {
				t.Errorf("init_script lacks %s", want)
			}
		})
	}
}

// TestInitScriptStartsAgent takes the init script from a real apply with
// CODER_CA_CERT_FILE set and runs it against a fake control plane whose
// certificate only that CA vouches for.
func TestInitScriptStartsAgent(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane(t, 0, false)
	d := newTFDir(t, template(""), map[string]string{
		EnvURL:             cp.URL,
		EnvCACertFile:      cp.CAFile,
		EnvProvisionerOS:   "linux",
		EnvProvisionerArch: "amd64",
	})
	d.apply()
	var script, token string
	d.output("init_script", &script)
	d.output("token", &token)
	if !strings.Contains(script, cp.URL+"/bin/coder-linux-amd64") || !strings.Contains(script, cp.CAPEM) {
		t.Fatalf("init_script lacks the download URL or the CA:\n%s", script)
	}
	if strings.Contains(script, "# the test CA") {
		t.Errorf("init_script carries the CA file's comment; want only certificates")
	}
	marker, markerCA, stderr, err := runInitScript(t, script, pathWithout(t), "CODER_AGENT_TOKEN="+token)
	if err != nil {
		t.Fatalf("init script: %v\n%s", err, stderr)
	}
	if marker["args"] != "agent" || marker["url"] != cp.URL || marker["token"] != token {
		t.Errorf("fake agent saw %v, want args=agent url=%s and the agent's token", marker, cp.URL)
	}
	if filepath.Base(marker["cert"]) != "ca.pem" || markerCA != cp.CAPEM {
		t.Errorf("SSL_CERT_FILE=%q holding %q, want the embedded CA", marker["cert"], markerCA)
	}
}

func TestValidationErrors(t *testing.T) {
	t.Parallel()
	d := newTFDir(t, template(""), nil)
	header := template("")[:strings.Index(template(""), "variable")]
	tests := []struct {
		name, body, want string
	}{
		{"bad slug", `resource "coder_app" "a" {
  agent_id = "x"
  slug     = "Code_Server"
  port     = 8080
}`, "slug"},
		{"slug with double hyphen", `resource "coder_app" "a" {
  agent_id = "x"
  slug     = "code--server"
  port     = 8080
}`, "slug"},
		{"url and port", `resource "coder_app" "a" {
  agent_id = "x"
  slug     = "app"
  url      = "http://localhost:8080"
  port     = 8080
}`, "exactly one of url and port"},
		{"neither url nor port", `resource "coder_app" "a" {
  agent_id = "x"
  slug     = "app"
}`, "exactly one of url and port"},
		{"port out of range", `resource "coder_app" "a" {
  agent_id = "x"
  slug     = "app"
  port     = 70000
}`, "between 1 and 65535"},
		{"bad share", `resource "coder_app" "a" {
  agent_id = "x"
  slug     = "app"
  port     = 80
  share    = "everyone"
}`, "owner, authenticated, public"},
		{"bad os", `resource "coder_agent" "a" {
  os   = "plan9"
  arch = "amd64"
}`, "linux, darwin, windows"},
		{"bad arch", `resource "coder_agent" "a" {
  os   = "linux"
  arch = "x86_64"
}`, "architecture"},
	}
	for _, tt := range tests {
		// Sequential: the cases share one initialised folder.
		t.Run(tt.name, func(t *testing.T) {
			d.write(header + tt.body + "\n")
			out, err := d.tf().Validate(d.ctx())
			if err != nil {
				t.Fatalf("terraform validate: %v", err)
			}
			var msgs []string
			for _, diag := range out.Diagnostics {
				msgs = append(msgs, diag.Summary+": "+diag.Detail)
			}
			if out.Valid || !strings.Contains(strings.Join(msgs, "\n"), tt.want) {
				t.Errorf("got valid=%v with %q, want an error mentioning %q", out.Valid, msgs, tt.want)
			}
		})
	}
}

// TestBadConfiguration plans with a bad environment or provider block: the
// error names the culprit. (terraform validate does not validate provider
// blocks, so these show up at plan time.)
func TestBadConfiguration(t *testing.T) {
	t.Parallel()
	d := newTFDir(t, template(""), nil)
	tests := []struct {
		name          string
		env           map[string]string
		providerBlock string
		want          string
	}{
		{name: "transition", env: map[string]string{EnvWorkspaceTransition: "restart"}, want: EnvWorkspaceTransition},
		{name: "tags", env: map[string]string{EnvProvisionerTags: "scope=user"}, want: EnvProvisionerTags},
		{name: "CA file", env: map[string]string{EnvCACertFile: "/nonexistent/ca.pem"}, want: EnvCACertFile},
		{name: "CODER_URL", env: map[string]string{EnvURL: "ftp://coder.example.test"}, want: EnvURL},
		{name: "provider url", providerBlock: "provider \"coder\" {\n  url = \"coder.example.test\"\n}", want: "http or https URL"},
	}
	for _, tt := range tests {
		// Sequential: the cases share one initialised folder.
		t.Run(tt.name, func(t *testing.T) {
			d.write(template(tt.providerBlock))
			d.env = tt.env
			_, err := d.tf().Plan(d.ctx())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("plan: got %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

// TestUpdateKeepsIdentity changes startup_script: the agent is updated in
// place and keeps its id and token; the apps do not change at all.
func TestUpdateKeepsIdentity(t *testing.T) {
	t.Parallel()
	d := newTFDir(t, template(""), map[string]string{EnvURL: "https://coder.example.test"})
	d.apply()
	before := d.show()
	agentBefore := stateResource(t, before, "coder_agent.main")
	appBefore := stateResource(t, before, "coder_app.code")

	planFile := filepath.Join(d.dir, "update.tfplan")
	if _, err := d.tf().Plan(d.ctx(), tfexec.Var("startup_script=echo two"), tfexec.Out(planFile)); err != nil {
		t.Fatalf("terraform plan: %v", err)
	}
	plan, err := d.tf().ShowPlanFile(d.ctx(), planFile)
	if err != nil {
		t.Fatalf("terraform show plan: %v", err)
	}
	actions := map[string][]string{}
	for _, rc := range plan.ResourceChanges {
		for _, a := range rc.Change.Actions {
			actions[rc.Address] = append(actions[rc.Address], string(a))
		}
	}
	want := map[string][]string{
		"coder_agent.main":  {"update"},
		"coder_app.code":    {"no-op"},
		"coder_app.docs[0]": {"no-op"},
	}
	if !reflect.DeepEqual(actions, want) {
		t.Errorf("planned actions: got %v, want %v", actions, want)
	}
	if err := d.tf().Apply(d.ctx(), tfexec.DirOrPlan(planFile)); err != nil {
		t.Fatalf("terraform apply: %v", err)
	}

	after := d.show()
	agentAfter := stateResource(t, after, "coder_agent.main")
	for _, k := range []string{"id", "token", "init_script"} {
		if agentAfter[k] != agentBefore[k] {
			t.Errorf("coder_agent.%s changed: %v -> %v", k, agentBefore[k], agentAfter[k])
		}
	}
	if agentAfter["startup_script"] != "echo two" {
		t.Errorf("startup_script: got %v, want echo two", agentAfter["startup_script"])
	}
	if appAfter := stateResource(t, after, "coder_app.code"); appAfter["id"] != appBefore["id"] {
		t.Errorf("coder_app.code id changed: %v -> %v", appBefore["id"], appAfter["id"])
	}

	// A new access URL rewrites init_script in place, still keeping id and token.
	d.env = map[string]string{EnvURL: "https://moved.example.test"}
	d.apply(tfexec.Var("startup_script=echo two"))
	moved := stateResource(t, d.show(), "coder_agent.main")
	if moved["id"] != agentBefore["id"] || moved["token"] != agentBefore["token"] {
		t.Errorf("id or token changed with the URL")
	}
	if s, _ := moved["init_script"].(string); !strings.Contains(s, "https://moved.example.test/bin/") {
		t.Errorf("init_script was not rewritten for the new URL")
	}
}
