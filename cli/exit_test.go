package cli_test

import (
	"bytes"
	"strings"
	"testing"

	"airgapcoder/cli"
)

// TestExitCodes runs cli.Main in process: 0 on success, 2 on usage errors
// with a message naming the culprit, 1 on failures, and always at most one
// error line on stderr.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	dead := "http://" + freeAddr(t) // nobody listens here
	const deadPG = "postgres://coder@127.0.0.1:1/none?connect_timeout=2"
	tests := []struct {
		name string
		args []string
		code int
		want []string // substrings of stderr
	}{
		{name: "Help", args: []string{"--help"}, code: 0},
		{name: "SubcommandHelp", args: []string{"templates", "create", "--help"}, code: 0},
		{name: "UnknownCommand", args: []string{"frobnicate"}, code: 2, want: []string{"frobnicate"}},
		{name: "UnknownSubcommand", args: []string{"templates", "frobnicate"}, code: 2, want: []string{"frobnicate"}},
		{name: "UnknownFlag", args: []string{"list", "--frobnicate"}, code: 2, want: []string{"--frobnicate"}},
		{name: "UnknownShorthand", args: []string{"list", "-Z"}, code: 2, want: []string{"-Z"}},
		{name: "MissingArg", args: []string{"create"}, code: 2, want: []string{"NAME"}},
		{name: "MissingLoginURL", args: []string{"login"}, code: 2, want: []string{"URL"}},
		{name: "StrayArg", args: []string{"list", "extra"}, code: 2, want: []string{"extra"}},
		{name: "BadDuration", args: []string{"tokens", "create", "--lifetime", "forever"}, code: 2, want: []string{"--lifetime", "forever"}},
		{name: "BadInt", args: []string{"server", "--provisioner-daemons", "abc"}, code: 2, want: []string{"--provisioner-daemons", "abc"}},
		{name: "BadBool", args: []string{"server", "--telemetry=maybe"}, code: 2, want: []string{"--telemetry", "maybe"}},
		{name: "BadOutput", args: []string{"list", "-o", "yaml", "--url", dead, "--token", "x"}, code: 2, want: []string{"--output", "yaml"}},
		{name: "BadOutputShow", args: []string{"show", "ws", "-o", "yaml", "--url", dead, "--token", "x"}, code: 2, want: []string{"--output", "yaml"}},
		{name: "BadProvisionerTag", args: []string{"templates", "create", "t", "--directory", ".", "--provisioner-tag", "novalue"}, code: 2, want: []string{"--provisioner-tag", "novalue"}},
		{name: "BadRole", args: []string{"users", "create", "--username", "u", "--email", "u@example.com", "--password", "password1", "--role", "king", "--url", dead, "--token", "x"}, code: 2, want: []string{"--role", "king"}},
		{name: "TelemetryWithoutURL", args: []string{"server", "--telemetry", "--postgres-url", deadPG}, code: 2, want: []string{"--telemetry-url"}},
		{name: "UpdateCheckWithoutURL", args: []string{"server", "--update-check", "--postgres-url", deadPG}, code: 2, want: []string{"--update-check-url"}},
		{name: "BadDeploymentURL", args: []string{"login", "ftp://example.com"}, code: 2, want: []string{"ftp://example.com"}},
		{name: "Unreachable", args: []string{"list", "--url", dead, "--token", "x"}, code: 1, want: []string{dead}},
		{name: "UnreachableLogin", args: []string{"login", dead}, code: 1, want: []string{dead}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Main(tt.args, strings.NewReader(""), &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("coder %s: exit code got %d, want %d\nstdout: %s\nstderr: %s", strings.Join(tt.args, " "), code, tt.code, &stdout, &stderr)
			}
			errOut := stderr.String()
			for _, want := range tt.want {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr does not name %q:\n%s", want, errOut)
				}
			}
			if tt.code == 0 {
				if errOut != "" {
					t.Errorf("stderr on success: got %q, want nothing", errOut)
				}
				if stdout.Len() == 0 {
					t.Error("stdout: got nothing, want help text")
				}
				return
			}
			if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "error: ") {
				t.Errorf("stderr: got %d line(s), want one \"error: ...\" line:\n%s", len(lines), errOut)
			}
		})
	}
}
