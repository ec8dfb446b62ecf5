package redact_test

import (
	"testing"

	"airgapcoder/internal/redact"
)

func TestKey(t *testing.T) {
	for key, want := range map[string]bool{
		"password": true, "PGPASSWORD": true, "postgres.password": true, "psk": true, "provisioner-daemon-psk": true,
		"session_token": true, "CODER_AGENT_TOKEN": true, "Coder-Session-Token": true, "Cookie": true, "Authorization": true,
		"oidc-client-secret": true, "key": true, "tls_key": true, "tlsKeyFile": true, "x-api-key": true, "privateKey": true,
		"ssl_passphrase_command": true, "credentials": true,
		"name": false, "url": false, "postgres_url": false, "monkey": false, "keyboard": false, "hosts": false, "component": false,
		"err": false, "max_connections": false, "access-url": false,
	} {
		if got := redact.Key(key); got != want {
			t.Errorf("Key(%q): got %v, want %v", key, got, want)
		}
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nothing secret here", "nothing secret here"},
		{"postgres://coder:s3cr3t@db:5432/coder?sslmode=disable", "postgres://coder:[redacted]@db:5432/coder?sslmode=disable"},
		{"postgres://coder@db/coder", "postgres://coder@db/coder"},
		{"https://x-access-token:ghp_abc@github.com/o/r.git", "https://x-access-token:[redacted]@github.com/o/r.git"},
		{"GET /x?token=abc123&page=2", "GET /x?token=[redacted]&page=2"},
		{"host=db user=coder password=hunter2 dbname=coder", "host=db user=coder password=[redacted] dbname=coder"},
		{`password="with space" next`, `password=[redacted] next`},
		{"CODER_AGENT_TOKEN=abc-def", "CODER_AGENT_TOKEN=[redacted]"},
		{"Coder-Session-Token: abc", "Coder-Session-Token: [redacted]"},
		{"Authorization: Bearer abcdefghijkl", "Authorization: [redacted] [redacted]"},
		{`{"psk": "abc", "name": "x", "session_token":"q\"r"}`, `{"psk": "[redacted]", "name": "x", "session_token":"[redacted]"}`},
		{"ALTER ROLE coder PASSWORD 'hunter2'", "ALTER ROLE coder PASSWORD '[redacted]'"},
		{"token AbCdEfGhIj-abcdefghijklmnopqrstuv used", "token [redacted] used"},
		{"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n", "-----BEGIN PRIVATE KEY----- [redacted] -----END PRIVATE KEY-----\n"},
		{"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"},
		{"id 0b9c4a1e-6a43-4b43-9d1c-6a2b2f5e7c11 and admin@example.com", "id 0b9c4a1e-6a43-4b43-9d1c-6a2b2f5e7c11 and admin@example.com"},
	} {
		got := redact.String(tc.in)
		if got != tc.want {
			t.Errorf("String(%q):\n got %q\nwant %q", tc.in, got, tc.want)
		}
		if again := redact.String(got); again != got {
			t.Errorf("String is not idempotent on %q: got %q", got, again)
		}
	}
}
