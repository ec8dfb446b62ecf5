package provisionerd_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"airgapcoder/codersdk"
)

// externalAuthTemplate declares providers in the root module and in a
// child module: gitea required at the root but optional in the module
// (required wins), gitlab and github optional only. A build writes gitea's
// token to the file var.out names from a local-exec and outputs both
// tokens.
var externalAuthTemplate = map[string]string{
	"main.tf": coderTF + `
variable "out" {
  type    = string
  default = ""
}

data "coder_external_auth" "gitea" {
  id = "gitea"
}

data "coder_external_auth" "gitlab" {
  id       = "gitlab"
  optional = true
}

module "tools" {
  source = "./tools"
}

resource "terraform_data" "clone" {
  count = var.out == "" ? 0 : 1
  provisioner "local-exec" {
    command = "printf '%s' \"$TOKEN\" > \"$OUT\""
    environment = {
      TOKEN = data.coder_external_auth.gitea.access_token
      OUT   = var.out
    }
  }
}

output "tokens" {
  sensitive = true
  value = {
    gitea  = data.coder_external_auth.gitea.access_token
    gitlab = data.coder_external_auth.gitlab.access_token
  }
}
`,
	"tools/main.tf": coderTF + `
data "coder_external_auth" "gitea" {
  id       = "gitea"
  optional = true
}

data "coder_external_auth" "github" {
  id       = "github"
  optional = true
}
`,
}

// TestExternalAuthImport: an import reports every data
// "coder_external_auth" of the template, child modules included, once per
// id, with its optional flag.
func TestExternalAuthImport(t *testing.T) {
	f := newFakeCoderd(t)
	f.startDaemon(t, nil)
	done := mustComplete(t, f.run(t, importJob, externalAuthTemplate))
	want := []codersdk.TemplateVersionExternalAuthProvider{
		{ID: "gitea", Optional: false}, {ID: "github", Optional: true}, {ID: "gitlab", Optional: true},
	}
	if !reflect.DeepEqual(done.ExternalAuthProviders, want) {
		t.Errorf("external auth providers: got %+v, want %+v", done.ExternalAuthProviders, want)
	}

	// A template without any reports none.
	plain := mustComplete(t, f.run(t, importJob, map[string]string{"main.tf": coderTF + `data "coder_workspace" "me" {}`}))
	if len(plain.ExternalAuthProviders) != 0 {
		t.Errorf("a template without coder_external_auth: got providers %+v, want none", plain.ExternalAuthProviders)
	}
}

// TestExternalAuthBuild: the token coderd sends for a provider is what
// data.coder_external_auth.<x>.access_token holds during the build (a
// local-exec writes it, an output keeps it), a provider without a token
// reads "", and the token shows in no log.
func TestExternalAuthBuild(t *testing.T) {
	const token = "gta_0123456789abcdef-external-auth-secret"
	f := newFakeCoderd(t)
	daemonLog := f.startDaemon(t, nil)
	out := filepath.Join(t.TempDir(), "token")

	job := buildJob(codersdk.WorkspaceTransitionStart)
	job.VariableValues = []codersdk.VariableValue{{Name: "out", Value: out}}
	job.ExternalAuthProviders = []codersdk.ExternalAuthProviderToken{{ID: "gitea", AccessToken: token}}
	res := f.run(t, job, externalAuthTemplate)
	done := mustComplete(t, res)

	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the local-exec wrote no token file: %v\nlogs:\n%s", err, res.LogText())
	}
	if string(got) != token {
		t.Errorf("access_token seen by a resource: got %q, want %q", got, token)
	}
	var tokens map[string]string
	decode(t, stateOutputs(t, done.State)["tokens"], &tokens)
	if want := map[string]string{"gitea": token, "gitlab": ""}; !reflect.DeepEqual(tokens, want) {
		t.Errorf("access tokens in the state: got %q, want %q", tokens, want)
	}
	for name, text := range map[string]string{"daemon log": daemonLog.String(), "job log": res.LogText()} {
		if strings.Contains(text, token) {
			t.Errorf("%s contains the external auth token:\n%s", name, text)
		}
	}
}
