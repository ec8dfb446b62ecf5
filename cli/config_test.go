package cli_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// writeConfig writes a YAML config file and returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "coder.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigBadValueNamesItsSource checks that a bad value in exactly one
// layer (flag, environment, config file) is a usage error (exit 2) whose
// message names that layer. None of these runs gets as far as starting a
// server: should one do so by mistake, the unreachable --postgres-url makes it
// exit 1, not 2.
func TestConfigBadValueNamesItsSource(t *testing.T) {
	t.Parallel()
	const deadPG = "postgres://coder@127.0.0.1:1/none?connect_timeout=2"
	badValue := writeConfig(t, "provisioner-daemons: abc\n")
	unknownKey := writeConfig(t, "http-address: 127.0.0.1:0\nprovisioner-deamons: 2\n")
	badYAML := writeConfig(t, "http-address: [127.0.0.1\n")
	missing := filepath.Join(t.TempDir(), "missing.yaml")

	tests := []struct {
		name string
		env  []string
		args []string
		want []string // substrings of stderr
	}{
		{
			name: "Flag",
			args: []string{"--provisioner-daemons", "abc"},
			want: []string{"--provisioner-daemons", "abc"},
		},
		{
			name: "Env",
			env:  []string{"CODER_PROVISIONER_DAEMONS=abc"},
			want: []string{"CODER_PROVISIONER_DAEMONS", "abc"},
		},
		{
			name: "EnvBool",
			env:  []string{"CODER_TELEMETRY_ENABLE=maybe"},
			want: []string{"CODER_TELEMETRY_ENABLE", "maybe"},
		},
		{
			name: "ConfigFileFlag",
			args: []string{"--config", badValue},
			want: []string{"config file " + badValue, "provisioner-daemons", "abc"},
		},
		{
			name: "ConfigFileEnv",
			env:  []string{"CODER_CONFIG_PATH=" + badValue},
			want: []string{"config file " + badValue, "provisioner-daemons", "abc"},
		},
		{
			name: "ConfigFileUnknownKey",
			args: []string{"--config", unknownKey},
			want: []string{unknownKey, "provisioner-deamons"},
		},
		{
			name: "ConfigFileBadYAML",
			args: []string{"--config", badYAML},
			want: []string{badYAML},
		},
		{
			name: "ConfigFileMissing",
			args: []string{"--config", missing},
			want: []string{missing},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"server", "--http-address", "127.0.0.1:0", "--postgres-url", deadPG,
				"--global-config", t.TempDir(), "--cache-dir", t.TempDir()}, tt.args...)
			stdout, stderr, code := run(t, baseEnv(t, tt.env...), args...)
			if code != 2 {
				t.Fatalf("exit code: got %d, want 2\nstdout: %s\nstderr: %s", code, stdout, stderr)
			}
			for _, want := range tt.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not name %q:\n%s", want, stderr)
				}
			}
			if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "error: ") {
				t.Errorf("stderr: got %d line(s), want one \"error: ...\" line:\n%s", len(lines), stderr)
			}
		})
	}
}

// TestConfigPrecedence proves flags > CODER_* environment > config file >
// defaults for `coder server`. Every layer below the winner holds an
// --http-address nobody can listen on, so the server answers /healthz on the
// winning address only if the winning layer was used; and every layer holds
// its own --provisioner-daemon-psk, of which only the winner's is accepted.
// Each server is then stopped with SIGTERM and must exit 0.
func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	// Addresses no machine can bind: the losing layers.
	const (
		fileLoser = "256.0.0.1:1"
		envLoser  = "256.0.0.2:1"
	)
	tests := []struct {
		name string
		// setup returns env, extra args, the address that must win, the PSK
		// that must win and the PSKs that must lose.
		setup func(t *testing.T) (env, args []string, winner, psk string, losers []string)
	}{
		{
			name: "FlagBeatsEnvAndFile",
			setup: func(t *testing.T) ([]string, []string, string, string, []string) {
				winner := freeAddr(t)
				file := writeConfig(t, "http-address: \""+fileLoser+"\"\nprovisioner-daemon-psk: file-psk\n")
				return []string{"CODER_HTTP_ADDRESS=" + envLoser, "CODER_PROVISIONER_DAEMON_PSK=env-psk", "CODER_CONFIG_PATH=" + file},
					[]string{"--http-address", winner, "--provisioner-daemon-psk", "flag-psk"}, winner, "flag-psk", []string{"env-psk", "file-psk"}
			},
		},
		{
			name: "EnvBeatsFile",
			setup: func(t *testing.T) ([]string, []string, string, string, []string) {
				winner := freeAddr(t)
				file := writeConfig(t, "http-address: \""+fileLoser+"\"\nprovisioner-daemon-psk: file-psk\n")
				return []string{"CODER_HTTP_ADDRESS=" + winner, "CODER_PROVISIONER_DAEMON_PSK=env-psk"},
					[]string{"--config", file}, winner, "env-psk", []string{"file-psk"}
			},
		},
		{
			name: "FileBeatsDefault",
			setup: func(t *testing.T) ([]string, []string, string, string, []string) {
				winner := freeAddr(t)
				// Unquoted, as people write it.
				file := writeConfig(t, "http-address: "+winner+"\nprovisioner-daemon-psk: file-psk\n")
				return []string{"CODER_CONFIG_PATH=" + file}, nil, winner, "file-psk", []string{"flag-psk"}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, args, winner, psk, losers := tt.setup(t)
			dir := t.TempDir()
			// No built-in provisioners: they need terraform, and this is about
			// configuration layering only.
			args = append([]string{"server", "--postgres-url", coderdtest.NewDatabase(t), "--provisioner-daemons", "0",
				"--global-config", filepath.Join(dir, "config"), "--cache-dir", filepath.Join(dir, "cache")}, args...)
			srv := start(t, baseEnv(t, env...), args...)
			waitHealthy(t, srv, "http://"+winner)

			u, _ := url.Parse("http://" + winner)
			register := func(key string) error {
				c := codersdk.New(u)
				c.ProvisionerPSK = key
				_, err := c.RegisterProvisionerDaemon(context.Background(), codersdk.RegisterProvisionerDaemonRequest{Name: "precedence-" + key})
				return err
			}
			if err := register(psk); err != nil {
				t.Errorf("register with the winning PSK %q: %v", psk, err)
			}
			for _, key := range losers {
				if err := register(key); !codersdk.IsStatus(err, http.StatusUnauthorized) {
					t.Errorf("register with the losing PSK %q: got %v, want 401", key, err)
				}
			}
			stopGracefully(t, srv)
		})
	}

	// The losers really are unusable: on its own, a losing address makes the
	// server fail (exit 1) naming the flag.
	t.Run("LoserIsUnusable", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		stdout, stderr, code := run(t, baseEnv(t, "CODER_HTTP_ADDRESS="+envLoser), "server",
			"--postgres-url", coderdtest.NewDatabase(t), "--provisioner-daemons", "0",
			"--global-config", filepath.Join(dir, "config"), "--cache-dir", filepath.Join(dir, "cache"))
		if code != 1 || !strings.Contains(stderr, "--http-address") || !strings.Contains(stderr, envLoser) {
			t.Fatalf("server on %s: got exit %d, want 1 with an error naming --http-address %s\nstdout: %s\nstderr: %s", envLoser, code, envLoser, stdout, stderr)
		}
	})
}
