package cli_test

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
)

// textLogLine is a line of the text log format.
var textLogLine = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO |WARN |ERROR) \S.*$`)

// serverLogs runs `coder server` with extra args and env until it is ready
// and returns what it logged, after stopping it.
func serverLogs(t *testing.T, env []string, args ...string) string {
	t.Helper()
	addr := freeAddr(t)
	dir := t.TempDir()
	args = append([]string{"server",
		"--http-address", addr,
		"--postgres-url", coderdtest.NewDatabase(t),
		"--provisioner-daemons", "0",
		"--global-config", filepath.Join(dir, "config"),
		"--cache-dir", filepath.Join(dir, "cache"),
	}, args...)
	p := start(t, baseEnv(t, env...), args...)
	waitHealthy(t, p, "http://"+addr)
	p.waitStderr(t, "coder server is ready", 30*time.Second)
	stopGracefully(t, p)
	return p.stderr.String()
}

// TestServerLogFormat: --log-format and CODER_LOG_FORMAT pick the format of
// coder server's logs; without them, logs that do not go to a terminal are
// JSON lines.
func TestServerLogFormat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		json bool
	}{
		{name: "default off a terminal", json: true},
		{name: "flag text", args: []string{"--log-format", "text"}},
		{name: "env text", env: []string{"CODER_LOG_FORMAT=text"}},
		{name: "flag json beats env text", env: []string{"CODER_LOG_FORMAT=text"}, args: []string{"--log-format=json"}, json: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs := serverLogs(t, tc.env, tc.args...)
			lines := strings.Split(strings.TrimSpace(logs), "\n")
			for _, line := range lines {
				var rec map[string]any
				isJSON := json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] != nil && rec["level"] != nil
				if tc.json && !isJSON {
					t.Errorf("got a line that is not a JSON record: %q", line)
				}
				if !tc.json && !textLogLine.MatchString(line) {
					t.Errorf("got a line that is not a text record: %q", line)
				}
			}
			if !tc.json {
				if want := regexp.MustCompile(`(?m)^\S+ \S+ INFO  coder server is ready access_url=http://`); !want.MatchString(logs) {
					t.Errorf("no ready line like %q in:\n%s", want, logs)
				}
			}
		})
	}
}

// TestLogFormatUsageErrors: a bad --log-format or CODER_LOG_FORMAT is a usage
// error (exit 2) naming where the value came from, on every command that
// takes it.
func TestLogFormatUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{args: []string{"server", "--log-format", "xml"}, want: "--log-format"},
		{env: []string{"CODER_LOG_FORMAT=xml"}, args: []string{"server", "--postgres-url", "postgres://127.0.0.1:1/none"}, want: "CODER_LOG_FORMAT"},
		{args: []string{"provisionerd", "start", "--log-format", "yaml"}, want: "--log-format"},
		{env: []string{"CODER_LOG_FORMAT=yaml"}, args: []string{"provisionerd", "start"}, want: "CODER_LOG_FORMAT"},
		{args: []string{"appliance", "up", "--dir", "x", "--log-format", "logfmt"}, want: "--log-format"},
		{env: []string{"CODER_LOG_FORMAT=logfmt"}, args: []string{"appliance", "up", "--dir", "x"}, want: "CODER_LOG_FORMAT"},
	} {
		_, stderr, code := run(t, baseEnv(t, tc.env...), tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "text, json or auto") {
			t.Errorf("coder %s (env %v): exit %d, stderr %q; want exit 2 naming %s and the formats", strings.Join(tc.args, " "), tc.env, code, stderr, tc.want)
		}
	}
}
