package coderd

import (
	"testing"

	"airgapcoder/internal/redact"
)

// TestDebugPostgresSettingValue: settings that can hold a secret are
// masked whatever they hold; the rest lose only what looks secret.
func TestDebugPostgresSettingValue(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"max_connections", "100", "100"},
		{"primary_conninfo", "host=primary user=replicator password=hunter2", redact.Mask},
		{"ssl_passphrase_command", "echo hunter2", redact.Mask},
		{"archive_command", "aws s3 cp %p s3://bucket/%f", redact.Mask},
		{"restore_command", "", ""},
		{"myext.api_key", "abc", redact.Mask},
		{"myext.endpoint", "https://user:hunter2@host/", "https://user:" + redact.Mask + "@host/"},
		{"ssl_key_file", "server.key", "server.key"},
		{"password_encryption", "scram-sha-256", "scram-sha-256"},
	} {
		if got := postgresSettingValue(tc.name, tc.value); got != tc.want {
			t.Errorf("%s = %q: got %q, want %q", tc.name, tc.value, got, tc.want)
		}
	}
}
