package provisionerd_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"airgapcoder/codersdk"
	"airgapcoder/provisionerd"
)

const contextTemplate = coderTF + `
variable "greeting" {
  type    = string
  default = "hello"
}

output "greeting" {
  value = var.greeting
}

data "coder_workspace" "me" {}
data "coder_workspace_owner" "me" {}

data "coder_parameter" "region" {
  name    = "Region name"
  type    = "string"
  default = "eu"
  mutable = true
}

data "coder_parameter" "cpus" {
  name    = "cpus"
  type    = "number"
  default = 2
  mutable = true
  validation {
    min       = 1
    max       = 64
    monotonic = "increasing"
  }
}

output "workspace" {
  value = {
    id               = data.coder_workspace.me.id
    name             = data.coder_workspace.me.name
    transition       = data.coder_workspace.me.transition
    start_count      = data.coder_workspace.me.start_count
    template_id      = data.coder_workspace.me.template_id
    template_name    = data.coder_workspace.me.template_name
    template_version = data.coder_workspace.me.template_version
    access_url       = data.coder_workspace.me.access_url
  }
}

output "owner" {
  value = {
    id             = data.coder_workspace_owner.me.id
    name           = data.coder_workspace_owner.me.name
    full_name      = data.coder_workspace_owner.me.full_name
    email          = data.coder_workspace_owner.me.email
    groups         = data.coder_workspace_owner.me.groups
    rbac_roles     = data.coder_workspace_owner.me.rbac_roles
    ssh_public_key = data.coder_workspace_owner.me.ssh_public_key
    login_type     = data.coder_workspace_owner.me.login_type
  }
}

output "owner_secrets" {
  sensitive = true
  value = {
    session_token   = data.coder_workspace_owner.me.session_token
    ssh_private_key = data.coder_workspace_owner.me.ssh_private_key
  }
}

output "params" {
  value = {
    region = data.coder_parameter.region.value
    cpus   = data.coder_parameter.cpus.value
  }
}

resource "terraform_data" "echo" {
  provisioner "local-exec" {
    command = "echo \"building for $OWNER in $REGION\""
    environment = {
      OWNER  = data.coder_workspace_owner.me.name
      REGION = data.coder_parameter.region.value
    }
  }
}
`

const (
	secretToken = "owner-session-token-7f3a"
	secretKey   = "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret-key-material-91c2\n-----END OPENSSH PRIVATE KEY-----\n"
)

// buildJob is a start build of workspace "dev" owned by "alice".
func buildJob(transition codersdk.WorkspaceTransition) codersdk.AcquiredJob {
	return codersdk.AcquiredJob{
		Type: codersdk.ProvisionerJobTypeWorkspaceBuild, Transition: transition,
		TemplateID: "tpl-1111", TemplateName: "ctx", TemplateVersionName: "v7", TemplateVersionID: "tv-1",
		WorkspaceBuildID: "build-1", WorkspaceID: "ws-2222", WorkspaceName: "dev",
		WorkspaceOwnerID: "user-3333", WorkspaceOwner: "alice", BuildNumber: 1,
		Owner: codersdk.WorkspaceOwnerContext{
			FullName: "Alice Liddell", Email: "alice@example.test", Groups: []string{"devs", "ops"},
			Roles: []string{"owner", "member"}, SessionToken: secretToken,
			SSHPublicKey: "ssh-ed25519 AAAAC3Nz alice", SSHPrivateKey: secretKey, LoginType: "password",
		},
	}
}

// TestBuildContextReachesProvider: what a template reads through
// data.coder_workspace, data.coder_workspace_owner, data.coder_parameter
// and var is what coderd sent, and no secret of the owner's shows in a log.
func TestBuildContextReachesProvider(t *testing.T) {
	f := newFakeCoderd(t)
	daemonLog := f.startDaemon(t, func(o *provisionerd.Options) { o.AccessURL = "https://coder.example.test:8443" })
	files := map[string]string{"main.tf": contextTemplate}

	job := buildJob(codersdk.WorkspaceTransitionStart)
	job.RichParameterValues = []codersdk.WorkspaceBuildParameter{{Name: "Region name", Value: "us-west"}, {Name: "cpus", Value: "8"}}
	job.VariableValues = []codersdk.VariableValue{{Name: "greeting", Value: "hi"}}
	res := f.run(t, job, files)
	done := mustComplete(t, res)
	outs := stateOutputs(t, done.State)

	var greeting string
	decode(t, outs["greeting"], &greeting)
	if greeting != "hi" {
		t.Errorf("var.greeting: got %q, want the template variable's value %q", greeting, "hi")
	}

	var ws map[string]any
	decode(t, outs["workspace"], &ws)
	wantWS := map[string]any{
		"id": "ws-2222", "name": "dev", "transition": "start", "start_count": 1.0,
		"template_id": "tpl-1111", "template_name": "ctx", "template_version": "v7",
		"access_url": "https://coder.example.test:8443",
	}
	if !reflect.DeepEqual(ws, wantWS) {
		t.Errorf("data.coder_workspace: got %v, want %v", ws, wantWS)
	}

	var owner map[string]any
	decode(t, outs["owner"], &owner)
	wantOwner := map[string]any{
		"id": "user-3333", "name": "alice", "full_name": "Alice Liddell", "email": "alice@example.test",
		"groups": []any{"devs", "ops"}, "ssh_public_key": "ssh-ed25519 AAAAC3Nz alice", "login_type": "password",
		"rbac_roles": []any{map[string]any{"name": "owner", "org_id": ""}, map[string]any{"name": "member", "org_id": ""}},
	}
	if !reflect.DeepEqual(owner, wantOwner) {
		t.Errorf("data.coder_workspace_owner: got %v, want %v", owner, wantOwner)
	}
	var secrets map[string]string
	decode(t, outs["owner_secrets"], &secrets)
	if secrets["session_token"] != secretToken || secrets["ssh_private_key"] != secretKey {
		t.Errorf("owner secrets: got %q, want the session token and private key coderd sent", secrets)
	}

	var params map[string]string
	decode(t, outs["params"], &params)
	if want := map[string]string{"region": "us-west", "cpus": "8"}; !reflect.DeepEqual(params, want) {
		t.Errorf("parameter values: got %v, want %v", params, want)
	}
	if logs := res.LogText(); !strings.Contains(logs, "building for alice in us-west") {
		t.Errorf("local-exec output missing from the job log:\n%s", logs)
	}

	// Stop: the provider sees the transition; the previous values are
	// checked against monotonic validation.
	stop := buildJob(codersdk.WorkspaceTransitionStop)
	stop.State = done.State
	stop.RichParameterValues = []codersdk.WorkspaceBuildParameter{{Name: "cpus", Value: "8"}}
	stop.PreviousParameterValues = []codersdk.WorkspaceBuildParameter{{Name: "cpus", Value: "8"}}
	stopped := mustComplete(t, f.run(t, stop, files))
	decode(t, stateOutputs(t, stopped.State)["workspace"], &ws)
	if ws["transition"] != "stop" || ws["start_count"] != 0.0 {
		t.Errorf("stop build: got transition %v, start_count %v; want stop, 0", ws["transition"], ws["start_count"])
	}

	lower := buildJob(codersdk.WorkspaceTransitionStart)
	lower.State = stopped.State
	lower.RichParameterValues = []codersdk.WorkspaceBuildParameter{{Name: "cpus", Value: "4"}}
	lower.PreviousParameterValues = []codersdk.WorkspaceBuildParameter{{Name: "cpus", Value: "8"}}
	want := "parameter value '4' must be equal or greater than previous value: 8"
	if msg := mustFail(t, f.run(t, lower, files)); !strings.Contains(msg, want) {
		t.Errorf("decreasing a monotonic parameter: got error %q, want it to say %q", msg, want)
	}

	// Never in a log: the daemon's own, or the job's (terraform prints the
	// outputs of an apply, sensitive ones hidden).
	for name, text := range map[string]string{"daemon log": daemonLog.String(), "job log": res.LogText()} {
		for _, secret := range []string{secretToken, "secret-key-material-91c2"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contains the secret %q:\n%s", name, secret, text)
			}
		}
	}
}

// TestImportContext: an import runs as a workspace's first start without a
// build id, so the provider does not require template details, and the
// parameters take their defaults.
func TestImportContext(t *testing.T) {
	f := newFakeCoderd(t)
	f.startDaemon(t, nil)
	done := mustComplete(t, f.run(t, codersdk.AcquiredJob{Type: codersdk.ProvisionerJobTypeTemplateVersionImport}, map[string]string{"main.tf": contextTemplate}))
	if len(done.Parameters) != 2 {
		t.Fatalf("parameters: got %d, want 2", len(done.Parameters))
	}
	if len(done.Resources) != 1 || done.Resources[0].Type != "terraform_data" {
		t.Errorf("resources: got %+v, want terraform_data.echo", done.Resources)
	}
}

func decode(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}
