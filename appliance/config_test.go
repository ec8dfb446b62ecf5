package appliance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigAddresses: listen addresses must be host:port with a real port
// and a real host; the error names the key and shows the form wanted.
func TestConfigAddresses(t *testing.T) {
	for _, tt := range []struct {
		addr    string
		wantErr string
	}{
		{"127.0.0.1:3443", ""},
		{"0.0.0.0:3443", ""},
		{"[::]:3443", ""},
		{":3443", ""},
		{"coder.example.internal:3443", ""},
		{"127.0.0.1:99999", `port "99999" is not a number from 0 to 65535`},
		{"127.0.0.1:https", `port "https" is not a number`},
		{"my host:3443", `host "my host" is not an IP address or a DNS name`},
		{"\t127.0.0.1 https://x.example:3443", "want host:port"},
		{"127.0.0.1", "want host:port"},
	} {
		t.Run(tt.addr, func(t *testing.T) {
			dir := t.TempDir()
			body := "tls-address: " + yamlQuote(tt.addr) + "\n"
			if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(dir, nil)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("got %v, want it accepted", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), "tls-address") || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got %v, want an error naming tls-address and %q", err, tt.wantErr)
			}
		})
	}
}

func yamlQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\t", `\t`).Replace(s) + `"`
}
