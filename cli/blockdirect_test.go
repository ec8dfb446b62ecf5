package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBlockDirectConnections: --block-direct-connections, CODER_BLOCK_DIRECT
// and the config file key are still accepted (scripts written for Coder
// pass them), hidden from help, and logged once as having no effect: every
// workspace connection is relayed through coderd already.
func TestBlockDirectConnections(t *testing.T) {
	t.Parallel()
	if help := mustRun(t, baseEnv(t), "server", "--help"); strings.Contains(help, "block-direct") {
		t.Fatalf("coder server --help shows the flag that has no effect:\n%s", help)
	}
	config := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(config, []byte("block-direct-connections: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const warning = "has no effect: every workspace connection is relayed through coderd"
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want int
	}{
		{name: "Flag", args: []string{"--block-direct-connections"}, want: 1},
		{name: "Env", env: []string{"CODER_BLOCK_DIRECT=true"}, want: 1},
		{name: "ConfigFile", args: []string{"--config", config}, want: 1},
		{name: "Unset", want: 0},
		{name: "False", env: []string{"CODER_BLOCK_DIRECT=false"}, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs := serverLogs(t, tc.env, tc.args...)
			if got := strings.Count(logs, warning); got != tc.want {
				t.Fatalf("got the warning %d time(s), want %d:\n%s", got, tc.want, logs)
			}
		})
	}
}
