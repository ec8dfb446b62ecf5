package provisionerd_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/provisionerd"
)

// fakeAgentBinary stands in for the agent binary coderd serves: it records
// how the init script started it in $MARKER.
const fakeAgentBinary = `#!/bin/sh
{
	echo "args=$*"
	echo "url=$CODER_AGENT_URL"
	echo "auth=$CODER_AGENT_AUTH"
	echo "token=$CODER_AGENT_TOKEN"
} >"$MARKER"
cat "$SSL_CERT_FILE" >"$MARKER.ca"
`

// TestInitScriptFromProvider: coder_agent.init_script, as the provider
// writes it from the daemon's CODER_AGENT_SCRIPT_*, downloads the agent over
// HTTPS from coderd, whose CA the workspace does not know, and starts it.
func TestInitScriptFromProvider(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Fatalf("the init script test runs the sh script: run it on linux or darwin, not %s", runtime.GOOS)
	}
	f := newFakeCoderd(t)
	f.binaries["coder-"+runtime.GOOS+"-"+runtime.GOARCH] = []byte(fakeAgentBinary)
	f.startDaemon(t, func(o *provisionerd.Options) {
		o.AccessURL = f.URL
		o.AgentCACertFile = f.CAFile
	})
	marker := filepath.Join(t.TempDir(), "marker")
	// The script runs in a bare environment, as in a fresh container: no
	// SSL_CERT_FILE, no CODER_* of the provisioner's.
	done := mustComplete(t, f.run(t, buildJob(codersdk.WorkspaceTransitionStart), map[string]string{"main.tf": coderTF + `
data "coder_provisioner" "me" {}

resource "coder_agent" "main" {
  os   = data.coder_provisioner.me.os
  arch = data.coder_provisioner.me.arch
}

resource "terraform_data" "workspace" {
  provisioner "local-exec" {
    command = "env -i PATH=\"$PATH\" HOME=\"$HOME\" MARKER=\"$MARKER\" CODER_AGENT_TOKEN=\"$TOKEN\" sh -c \"$INIT_SCRIPT\""
    environment = {
      INIT_SCRIPT = coder_agent.main.init_script
      TOKEN       = coder_agent.main.token
      MARKER      = "` + marker + `"
    }
  }
}
`}))
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("the agent did not start: %v", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	agent := done.Resources[0].Agents[0]
	want := map[string]string{"args": "agent", "url": f.URL, "auth": "token", "token": agent.Token}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("the agent saw %s=%q, want %q", k, got[k], v)
		}
	}
	ca, _ := os.ReadFile(marker + ".ca")
	if !strings.HasPrefix(string(ca), f.CAPEM) {
		t.Errorf("the agent's SSL_CERT_FILE starts %.80q, want the CA of coderd's certificate", ca)
	}
}

// TestAgentCAOptions: an agent CA that cannot be carried stops New when it
// was asked for; a CA bundle too large to carry is left out with a warning.
func TestAgentCAOptions(t *testing.T) {
	f := newFakeCoderd(t)
	dir := t.TempDir()
	big := filepath.Join(dir, "trust.pem")
	if err := os.WriteFile(big, []byte(strings.Repeat(f.CAPEM, 200)), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("no certificates\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		opts     provisionerd.Options
		wantErr  string
		wantWarn string // in the daemon's log
	}{
		{"agent CA too large", provisionerd.Options{AgentCACertFile: big}, "too large to carry in agent init scripts", ""},
		{"agent CA without certificates", provisionerd.Options{AgentCACertFile: empty}, "holds no PEM certificate", ""},
		{"agent CA missing", provisionerd.Options{AgentCACertFile: filepath.Join(dir, "nope.pem")}, "nope.pem", ""},
		{"trust bundle too large: left out", provisionerd.Options{CACertFile: big}, "", "agent init scripts carry no CA"},
		{"trust bundle carried", provisionerd.Options{CACertFile: f.CAFile}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			tc.opts.Client, tc.opts.TerraformPath = f.client(), "terraform"
			tc.opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			_, err := provisionerd.New(tc.opts)
			if got := logs.String(); tc.wantWarn != "" && !strings.Contains(got, tc.wantWarn) {
				t.Errorf("daemon log %q, want it to say %q", got, tc.wantWarn)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("New: got %v, want no error", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("New: got %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}
