package provisionerd_test

import (
	"reflect"
	"strings"
	"testing"

	"airgapcoder/codersdk"
)

var importJob = codersdk.AcquiredJob{Type: codersdk.ProvisionerJobTypeTemplateVersionImport, TemplateName: "t"}

const parametersTemplate = coderTF + `
variable "default_region" {
  type    = string
  default = "eu"
}

data "coder_parameter" "region" {
  name         = "region"
  display_name = "Region"
  description  = "Where the workspace runs."
  type         = "string"
  form_type    = "dropdown"
  default      = var.default_region
  icon         = "/icon/region.svg"
  order        = 1
  option {
    name        = "Europe"
    description = "Frankfurt"
    value       = "eu"
    icon        = "/icon/eu.svg"
  }
  option {
    name  = "America"
    value = "us"
  }
}

data "coder_parameter" "cpus" {
  name    = "cpus"
  type    = "number"
  default = 2
  mutable = true
  order   = 2
  validation {
    min       = 1
    max       = 16
    monotonic = "increasing"
    error     = "Between {min} and {max}."
  }
}

# Required, and validated: the import needs a value that passes.
data "coder_parameter" "project" {
  name  = "project"
  order = 3
  validation {
    regex = "^[a-z][a-z0-9-]{2,}$"
    error = "Lower case letters, digits and dashes."
  }
}

data "coder_parameter" "disk" {
  name  = "disk"
  type  = "number"
  order = 4
  validation {
    min = 10
  }
}

data "coder_parameter" "zone" {
  name  = "zone"
  order = 5
  option {
    name  = "A"
    value = "a"
  }
  option {
    name  = "B"
    value = "b"
  }
  validation {
    regex = "^[ab]$"
    error = "a or b"
  }
}

data "coder_parameter" "dotfiles" {
  name      = "dotfiles"
  type      = "bool"
  form_type = "switch"
  default   = false
  mutable   = true
  ephemeral = true
  order     = 6
}

data "coder_parameter" "features" {
  name    = "features"
  type    = "list(string)"
  default = jsonencode(["git"])
  order   = 7
}

# Required without validation: the provider accepts no value.
data "coder_parameter" "image" {
  name  = "image"
  order = 8
}

resource "terraform_data" "disk" {
  input = "${data.coder_parameter.project.value}-${data.coder_parameter.disk.value}"
}
`

// TestImportParameters: every field of every data "coder_parameter" reaches
// the template version, including required ones the provider validates.
func TestImportParameters(t *testing.T) {
	f := newFakeCoderd(t)
	f.startDaemon(t, nil)
	job := importJob
	job.VariableValues = []codersdk.VariableValue{{Name: "default_region", Value: "us"}}
	res := f.run(t, job, map[string]string{"main.tf": parametersTemplate})
	done := mustComplete(t, res)

	i32 := func(n int32) *int32 { return &n }
	want := []codersdk.TemplateVersionParameter{
		{Name: "region", DisplayName: "Region", Description: "Where the workspace runs.", Type: "string", FormType: "dropdown",
			DefaultValue: "us", Icon: "/icon/region.svg", Order: 1, Options: []codersdk.TemplateVersionParameterOption{
				{Name: "Europe", Description: "Frankfurt", Value: "eu", Icon: "/icon/eu.svg"}, {Name: "America", Value: "us"},
			}},
		{Name: "cpus", Type: "number", FormType: "input", DefaultValue: "2", Mutable: true, Order: 2,
			ValidationMin: i32(1), ValidationMax: i32(16), ValidationMonotonic: "increasing", ValidationError: "Between {min} and {max}."},
		{Name: "project", Type: "string", FormType: "input", Required: true, Order: 3,
			ValidationRegex: "^[a-z][a-z0-9-]{2,}$", ValidationError: "Lower case letters, digits and dashes."},
		{Name: "disk", Type: "number", FormType: "input", Required: true, Order: 4, ValidationMin: i32(10)},
		{Name: "zone", Type: "string", FormType: "radio", Required: true, Order: 5, ValidationRegex: "^[ab]$", ValidationError: "a or b",
			Options: []codersdk.TemplateVersionParameterOption{{Name: "A", Value: "a"}, {Name: "B", Value: "b"}}},
		{Name: "dotfiles", Type: "bool", FormType: "switch", DefaultValue: "false", Mutable: true, Ephemeral: true, Order: 6},
		{Name: "features", Type: "list(string)", FormType: "tag-select", DefaultValue: `["git"]`, Order: 7},
		{Name: "image", Type: "string", FormType: "input", Required: true, Order: 8},
	}
	if len(done.Parameters) != len(want) {
		t.Fatalf("parameters: got %s, want %s", pretty(done.Parameters), pretty(want))
	}
	for i := range want {
		if !reflect.DeepEqual(done.Parameters[i], want[i]) {
			t.Errorf("parameter %s: got %s, want %s", want[i].Name, pretty(done.Parameters[i]), pretty(want[i]))
		}
	}
	for _, line := range []string{`Parameter "project" is required and validated: the import plans with the value "aaa" in its place`,
		`Parameter "disk" is required and validated: the import plans with the value "10" in its place`} {
		if !strings.Contains(res.LogText(), line) {
			t.Errorf("job log lacks %q:\n%s", line, res.LogText())
		}
	}
}

const variablesTemplate = coderTF + `
variable "docker_host" {
  type        = string
  description = "Docker engine."
}

variable "replicas" {
  type    = number
  default = 1
}

variable "labels" {
  type    = map(string)
  default = { team = "core" }
}

variable "api_key" {
  type      = string
  sensitive = true
  default   = "none"
}

resource "terraform_data" "replica" {
  count = var.replicas
  input = var.docker_host
}
`

// TestImportVariables: Terraform variables are recorded with their values,
// which reach terraform; a required one without a value fails the import
// with the command that fixes it.
func TestImportVariables(t *testing.T) {
	f := newFakeCoderd(t)
	f.startDaemon(t, nil)
	files := map[string]string{"main.tf": variablesTemplate}

	job := importJob
	job.VariableValues = []codersdk.VariableValue{{Name: "docker_host", Value: "unix:///run/podman.sock"}, {Name: "replicas", Value: "2"}}
	done := mustComplete(t, f.run(t, job, files))
	want := []codersdk.TemplateVersionVariable{
		{Name: "api_key", Type: "string", Value: "none", DefaultValue: "none", Sensitive: true},
		{Name: "docker_host", Description: "Docker engine.", Type: "string", Value: "unix:///run/podman.sock", Required: true},
		{Name: "labels", Type: "map(string)", Value: `{"team":"core"}`, DefaultValue: `{"team":"core"}`},
		{Name: "replicas", Type: "number", Value: "2", DefaultValue: "1"},
	}
	if !reflect.DeepEqual(done.Variables, want) {
		t.Errorf("variables: got %s, want %s", pretty(done.Variables), pretty(want))
	}
	if len(done.Resources) != 2 {
		t.Errorf("resources: got %s, want two replicas (var.replicas = 2)", pretty(done.Resources))
	}

	for _, tc := range []struct {
		name   string
		values []codersdk.VariableValue
		want   []string
	}{
		{"required variable without a value", nil,
			[]string{`"docker_host"`, "coder templates push --variable docker_host=VALUE"}},
		{"value for an undeclared variable", []codersdk.VariableValue{{Name: "docker_host", Value: "x"}, {Name: "nope", Value: "1"}},
			[]string{`"nope"`, "does not declare"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := importJob
			job.VariableValues = tc.values
			mustFailBeforeInit(t, f.run(t, job, files), tc.want...)
		})
	}
}

// TestImportWorkspaceTags: coder_workspace_tags entries are recorded as
// written, with the parameters they refer to; references coderd could not
// evaluate fail the import.
func TestImportWorkspaceTags(t *testing.T) {
	f := newFakeCoderd(t)
	f.startDaemon(t, nil)
	base := coderTF + `
variable "site" {
  type    = string
  default = "lab"
}

data "coder_parameter" "gpu_kind" {
  name    = "GPU kind"
  default = "none"
}

data "coder_parameter" "unused" {
  name    = "unused"
  default = "x"
}
`
	done := mustComplete(t, f.run(t, importJob, map[string]string{"main.tf": base + `
data "coder_workspace_tags" "custom" {
  tags = {
    "cluster"   = "on-prem"
    gpu         = data.coder_parameter.gpu_kind.value
    (var.site)  = lower("${var.site}-${data.coder_parameter.gpu_kind.value}")
  }
}
`}))
	gpu := map[string]string{"data.coder_parameter.gpu_kind": "GPU kind"}
	want := []codersdk.WorkspaceTagExpression{
		{Key: `"cluster"`, Value: `"on-prem"`},
		{Key: "gpu", Value: "data.coder_parameter.gpu_kind.value", References: gpu},
		{Key: "(var.site)", Value: `lower("${var.site}-${data.coder_parameter.gpu_kind.value}")`, References: gpu},
	}
	if !reflect.DeepEqual(done.WorkspaceTags, want) {
		t.Errorf("workspace tags: got %s, want %s", pretty(done.WorkspaceTags), pretty(want))
	}

	for _, tc := range []struct{ name, tags, want string }{
		{"other data source", `{ owner = data.coder_workspace_owner.me.name }`, "a workspace tag may refer only to var.NAME and data.coder_parameter.NAME.value"},
		{"parameter with count", `{ x = data.coder_parameter.counted[0].value }`, "data.coder_parameter.counted is not a single coder_parameter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := mustFail(t, f.run(t, importJob, map[string]string{"main.tf": base + `
data "coder_workspace_owner" "me" {}
data "coder_parameter" "counted" {
  count   = 1
  name    = "counted"
  default = "x"
}
data "coder_workspace_tags" "bad" {
  tags = ` + tc.tags + `
}
`}))
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, "data.coder_workspace_tags.bad") {
				t.Errorf("error %q, want it to name the block and say %q", msg, tc.want)
			}
		})
	}
}

// TestImportRetiredProvider: a template still written for the retired
// provider fails before terraform init, saying what to change.
func TestImportRetiredProvider(t *testing.T) {
	f := newFakeCoderd(t)
	f.startDaemon(t, nil)
	res := f.run(t, importJob, map[string]string{"main.tf": `terraform {
  required_providers {
    coder = {
      source = "coder.internal/appliance/coder"
    }
  }
}

data "coder_workspace" "me" {}
`})
	mustFailBeforeInit(t, res, "retired provider coder.internal/appliance/coder", "main.tf:4", `source = "coder/coder"`, "docs/templates.md")
}

// TestDownloadTemplateOutlastsServerErrors: while coderd answers 500 (its
// database restarting) the daemon asks again for the template's files
// and the job goes on to complete. (TestDownloadRetriesOnClock steps the
// waits, and shows that a 404 is not tried again.)
func TestDownloadTemplateOutlastsServerErrors(t *testing.T) {
	f := newFakeCoderd(t)
	f.fileErrors = 2
	daemonLog := f.startDaemon(t, nil)
	mustComplete(t, f.run(t, importJob, map[string]string{"main.tf": coderTF}))
	if got := strings.Count(daemonLog.String(), "download template; retrying"); got != 2 {
		t.Errorf("the daemon's log says %d retries of the download, want 2:\n%s", got, daemonLog.String())
	}
}

// TestImportResources: the planned resources, with the coder_metadata that
// refers to them (ids are not known in a plan).
func TestImportResources(t *testing.T) {
	f := newFakeCoderd(t)
	f.startDaemon(t, nil)
	done := mustComplete(t, f.run(t, importJob, map[string]string{"main.tf": coderTF + `
data "coder_workspace" "me" {}

resource "coder_agent" "main" {
  os   = "linux"
  arch = "amd64"
}

resource "terraform_data" "vm" {
  count = data.coder_workspace.me.start_count
  input = coder_agent.main.init_script
}

resource "terraform_data" "home" {}

resource "coder_metadata" "vm" {
  count       = data.coder_workspace.me.start_count
  resource_id = terraform_data.vm[count.index].id
  daily_cost  = 7
  item {
    key   = "size"
    value = "large"
  }
}

resource "coder_metadata" "home" {
  resource_id = terraform_data.home.id
  hide        = true
  icon        = "/icon/folder.svg"
}
`}))
	want := []codersdk.ProvisionedResource{
		{Type: "terraform_data", Name: "home", Hide: true, Icon: "/icon/folder.svg"},
		{Type: "terraform_data", Name: "vm[0]", DailyCost: 7, Metadata: []codersdk.WorkspaceResourceMetadata{{Key: "size", Value: "large"}}},
	}
	if !reflect.DeepEqual(done.Resources, want) {
		t.Errorf("resources: got %s, want %s", pretty(done.Resources), pretty(want))
	}
}
