package provisionerd

import (
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"airgapcoder/codersdk"
)

// TestCoderEnv covers what the end-to-end tests cannot see from a template:
// transitions without a state to show them, and which variables are set.
func TestCoderEnv(t *testing.T) {
	build := func(tr codersdk.WorkspaceTransition) *codersdk.AcquiredJob {
		return &codersdk.AcquiredJob{Type: codersdk.ProvisionerJobTypeWorkspaceBuild, Transition: tr, WorkspaceBuildID: "b1"}
	}
	tests := []struct {
		name    string
		job     *codersdk.AcquiredJob
		want    map[string]string
		notWant []string
	}{
		{"delete is a stop", build(codersdk.WorkspaceTransitionDelete), map[string]string{"CODER_WORKSPACE_TRANSITION": "stop", "CODER_WORKSPACE_BUILD_ID": "b1"}, nil},
		{"start", build(codersdk.WorkspaceTransitionStart), map[string]string{"CODER_WORKSPACE_TRANSITION": "start"}, nil},
		{"import: a start without a build id", &codersdk.AcquiredJob{Type: codersdk.ProvisionerJobTypeTemplateVersionImport},
			map[string]string{"CODER_WORKSPACE_TRANSITION": "start"}, []string{"CODER_WORKSPACE_BUILD_ID"}},
		{"no groups or roles: empty JSON arrays", build(codersdk.WorkspaceTransitionStart),
			map[string]string{"CODER_WORKSPACE_OWNER_GROUPS": "[]", "CODER_WORKSPACE_OWNER_RBAC_ROLES": "[]"}, nil},
		{"parameters by the hex sha256 of their name", &codersdk.AcquiredJob{
			Type:                    codersdk.ProvisionerJobTypeWorkspaceBuild,
			RichParameterValues:     []codersdk.WorkspaceBuildParameter{{Name: "Region name", Value: "eu"}},
			PreviousParameterValues: []codersdk.WorkspaceBuildParameter{{Name: "Region name", Value: "us"}},
		}, map[string]string{
			"CODER_PARAMETER_4039aa1eb9c1e71b726b0367724c0b61f8196c6786bccd1bbf1e87a32c4dca77":          "eu",
			"CODER_PARAMETER_PREVIOUS_4039aa1eb9c1e71b726b0367724c0b61f8196c6786bccd1bbf1e87a32c4dca77": "us",
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := coderEnv(tt.job, "https://coder.example.test")
			if got := env["CODER_AGENT_URL"]; got != "https://coder.example.test" {
				t.Errorf("CODER_AGENT_URL: got %q, want the access URL", got)
			}
			for k, v := range tt.want {
				if env[k] != v {
					t.Errorf("%s: got %q, want %q", k, env[k], v)
				}
			}
			for _, k := range tt.notWant {
				if _, ok := env[k]; ok {
					t.Errorf("%s is set, want it unset", k)
				}
			}
		})
	}
}

// TestEnvironmentKeepsTheBasics: terraform's own settings stay, and the
// old provider's variables are gone.
func TestEnvironmentKeepsTheBasics(t *testing.T) {
	d := &Daemon{opts: Options{AccessURL: "https://coder.example.test", CACertFile: "/etc/trust.pem"}}
	env := d.environment(&codersdk.AcquiredJob{Type: codersdk.ProvisionerJobTypeWorkspaceBuild}, "/job", "/job/rc", "/cache")
	for k, v := range map[string]string{
		"HOME": "/job", "TF_CLI_CONFIG_FILE": "/job/rc", "TF_PLUGIN_CACHE_DIR": "/cache", "CHECKPOINT_DISABLE": "1", "SSL_CERT_FILE": "/etc/trust.pem",
	} {
		if env[k] != v {
			t.Errorf("%s: got %q, want %q", k, env[k], v)
		}
	}
	if env["PATH"] == "" {
		t.Error("PATH is empty")
	}
	for _, k := range []string{"CODER_URL", "CODER_PROVISIONER_TAGS", "CODER_PROVISIONER_OS", "CODER_PROVISIONER_ARCH", "CODER_CA_CERT_FILE"} {
		if _, ok := env[k]; ok {
			t.Errorf("%s is set: only the retired provider read it", k)
		}
	}
}

func TestRegexSample(t *testing.T) {
	for _, expr := range []string{
		`^[a-z][a-z0-9-]{2,}$`, `^\d{3}-\d{4}$`, `^(dev|prod)$`, `[A-Z]+_[0-9]?x`, `^[^0-9\s]{4}$`, `^$`, `.+@example\.com$`, `^(?i)hello$`,
	} {
		got, ok := regexSample(expr)
		if !ok {
			t.Errorf("regexSample(%q): no sample", expr)
			continue
		}
		if !regexp.MustCompile(expr).MatchString(got) {
			t.Errorf("regexSample(%q) = %q, which does not match", expr, got)
		}
	}
	if got, ok := regexSample(`[`); ok {
		t.Errorf("regexSample of an invalid regex: got %q, want none", got)
	}
}

func TestImportPlaceholders(t *testing.T) {
	params := []staticParameter{
		{name: "with default", typ: "number", validated: true},
		{name: "not validated", typ: "number", required: true},
		{name: "option", typ: "string", required: true, validated: true, options: []string{"b", "a"}},
		{name: "multi", typ: "list(string)", formType: "multi-select", required: true, validated: true, options: []string{"x"}},
		{name: "list", typ: "list(string)", required: true, validated: true},
		{name: "number", typ: "number", required: true, validated: true},
		{name: "bool", typ: "bool", required: true, validated: true},
		{name: "string without regex", typ: "string", required: true, validated: true},
		{name: "regex", typ: "string", required: true, validated: true, regex: `^v\d+$`},
	}
	got := importPlaceholders(params)
	want := map[string]string{"option": "b", "multi": `["x"]`, "list": "[]", "number": "0", "bool": "false", "regex": "v0"}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
}

// TestEnvironmentAgentFallbackURL: the build environment and the init
// scripts carry the agent's fallback URL only when the daemon has one that
// is not its agent URL.
func TestEnvironmentAgentFallbackURL(t *testing.T) {
	for _, tt := range []struct {
		name, accessURL, fallback, want string
	}{
		{"none", "https://proxy.example.test", "", ""},
		{"the agent URL itself", "https://coder.example.test", "https://coder.example.test/", ""},
		{"the primary behind a proxy", "https://proxy.example.test", "https://coder.example.test", "https://coder.example.test"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u, _ := url.Parse("https://coder.example.test")
			d, err := New(Options{Client: codersdk.New(u), TerraformPath: "terraform", AccessURL: tt.accessURL, AgentFallbackURL: tt.fallback,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			env := d.environment(&codersdk.AcquiredJob{Type: codersdk.ProvisionerJobTypeWorkspaceBuild}, "/job", "/job/rc", "/cache")
			if got, ok := env["CODER_AGENT_FALLBACK_URL"]; got != tt.want || ok != (tt.want != "") {
				t.Errorf("CODER_AGENT_FALLBACK_URL: got %q (set %v), want %q", got, ok, tt.want)
			}
			if got := strings.Contains(env["CODER_AGENT_SCRIPT_linux_amd64"], "CODER_AGENT_FALLBACK_URL"); got != (tt.want != "") {
				t.Errorf("the linux init script exports CODER_AGENT_FALLBACK_URL: %v, want %v", got, tt.want != "")
			}
			for _, v := range []string{"CODER_AGENT_SCRIPT_linux_amd64", "CODER_AGENT_SCRIPT_windows_amd64"} {
				if got := strings.Contains(env[v], "example.test/'"); got != (tt.want != "") {
					t.Errorf("%s carries a fallback URL: %v, want %v (%q)", v, got, tt.want != "", tt.want)
				}
			}
		})
	}
}
