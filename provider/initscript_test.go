package provider

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pathWithout returns a PATH folder holding links to the tools the init
// script and the fake agent use, less the ones in omit.
func pathWithout(t *testing.T, omit ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range []string{"mktemp", "cat", "date", "sleep", "chmod", "mv", "curl", "wget"} {
		if strings.Contains(" "+strings.Join(omit, " ")+" ", " "+tool+" ") {
			continue
		}
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s not installed (scripts/install-deps.sh installs it)", tool)
		}
		if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestInitScriptRuns runs the generated sh script against a fake control
// plane on loopback with a CA the system does not trust.
func TestInitScriptRuns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		omit      []string // tools missing in the workspace
		failFirst int32
		noCA      bool
		timeout   string // CODER_AGENT_DOWNLOAD_TIMEOUT
		wantErr   string // in stderr; "" for success
	}{
		{name: "curl"},
		{name: "wget", omit: []string{"curl"}},
		{name: "retries while the control plane starts", failFirst: 1},
		{name: "no CA embedded: untrusted certificate", noCA: true, timeout: "1", wantErr: "could not download the agent"},
		{name: "gives up", failFirst: 1000, timeout: "1", wantErr: "could not download the agent"},
		{name: "neither curl nor wget", omit: []string{"curl", "wget"}, wantErr: "neither curl nor wget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cp := newFakeControlPlane(t, tt.failFirst, false)
			in := initScriptInput{URL: cp.URL, OS: "linux", Arch: "amd64", CAPEM: cp.CAPEM}
			if tt.noCA {
				in.CAPEM = ""
			}
			var env []string
			if tt.timeout != "" {
				env = append(env, "CODER_AGENT_DOWNLOAD_TIMEOUT="+tt.timeout)
			}
			start := time.Now()
			marker, markerCA, stderr, err := runInitScript(t, initScript(in), pathWithout(t, tt.omit...), env...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(stderr, tt.wantErr) {
					t.Fatalf("got err %v and stderr %q, want a failure saying %q", err, stderr, tt.wantErr)
				}
				if len(marker) != 0 {
					t.Fatalf("the agent ran: %v", marker)
				}
				return
			}
			if err != nil {
				t.Fatalf("init script: %v\n%s", err, stderr)
			}
			want := map[string]string{"args": "agent", "url": cp.URL, "token": "secret-token"}
			for k, v := range want {
				if marker[k] != v {
					t.Errorf("agent saw %s=%q, want %q", k, marker[k], v)
				}
			}
			if !strings.HasSuffix(marker["cert"], "/ca.pem") || markerCA != cp.CAPEM {
				t.Errorf("SSL_CERT_FILE=%q with content %q, want the embedded CA", marker["cert"], markerCA)
			}
			if tt.failFirst > 0 && !strings.Contains(stderr, "retrying in 1s") {
				t.Errorf("stderr %q does not mention the retry", stderr)
			}
			t.Logf("ran in %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

func TestInitScriptText(t *testing.T) {
	ca := "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
	tests := []struct {
		name    string
		in      initScriptInput
		want    []string
		notWant []string
	}{
		{
			name: "darwin with CA",
			in:   initScriptInput{URL: "https://coder.example.test", OS: "darwin", Arch: "arm64", CAPEM: ca},
			want: []string{
				"#!/bin/sh\n",
				"BINARY_URL='https://coder.example.test/bin/coder-darwin-arm64'",
				"<<'" + caDelimiter + "'\n" + ca + caDelimiter + "\n",
				`--cacert "$CA_FILE"`, `--ca-certificate="$CA_FILE"`,
				`export CODER_AGENT_URL="$CODER_URL"`, `export SSL_CERT_FILE="$CA_FILE"`,
				`exec "$BINARY_PATH" agent`,
			},
			notWant: []string{"CODER_AGENT_TOKEN="},
		},
		{
			name:    "linux without CA",
			in:      initScriptInput{URL: "http://10.0.0.1:3000", OS: "linux", Arch: "amd64"},
			want:    []string{"BINARY_URL='http://10.0.0.1:3000/bin/coder-linux-amd64'"},
			notWant: []string{"CA_FILE", "SSL_CERT_FILE", "--cacert", "CODER_AGENT_TOKEN="},
		},
		{
			name: "windows",
			in:   initScriptInput{URL: "https://coder.example.test", OS: "windows", Arch: "amd64", CAPEM: ca},
			want: []string{
				"$BinaryURL = 'https://coder.example.test/bin/coder-windows-amd64.exe'",
				"-Value @'\n" + ca + "'@\n",
				"--cacert", "$env:CODER_AGENT_URL = $CoderURL",
			},
			notWant: []string{"#!/bin/sh"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := initScript(tt.in)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("script lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("script has %q:\n%s", w, got)
				}
			}
		})
	}
	// The sh scripts parse.
	for _, in := range []initScriptInput{tests[0].in, tests[1].in} {
		cmd := exec.Command("sh", "-n")
		cmd.Stdin = strings.NewReader(initScript(in))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sh -n: %v\n%s", err, out)
		}
	}
}
