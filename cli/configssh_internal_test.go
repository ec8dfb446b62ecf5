package cli

import (
	"slices"
	"strings"
	"testing"
)

// TestSSHConfigCiphers: the Host block asks OpenSSH for the agent's
// ciphers the local ssh knows, AES-GCM first, and for none when it knows
// none of them (an ssh built without OpenSSL has no AES-GCM, and a Ciphers
// line naming a cipher it lacks makes it refuse to connect).
func TestSSHConfigCiphers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		supported []string // what `ssh -Q cipher` lists
		want      []string
	}{
		{"OpenSSL build", []string{"3des-cbc", "aes128-cbc", "aes128-ctr", "aes192-ctr", "aes256-ctr", "aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com"},
			[]string{"aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr", "aes192-ctr", "aes256-ctr"}},
		{"without OpenSSL", []string{"aes128-ctr", "aes192-ctr", "aes256-ctr", "chacha20-poly1305@openssh.com"},
			[]string{"aes128-ctr", "aes192-ctr", "aes256-ctr"}},
		{"none of the agent's", []string{"chacha20-poly1305@openssh.com"}, nil},
	} {
		got := agentCiphersAmong(tc.supported)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: ciphers %q, want %q", tc.name, got, tc.want)
		}
		block := sshConfigBlock("/usr/bin/coder", "/home/a/.config/coderv2", []string{"dev"}, got)
		if line := "\tCiphers " + strings.Join(tc.want, ",") + "\n"; len(tc.want) > 0 && !strings.Contains(block, line) {
			t.Errorf("%s: the block lacks %q:\n%s", tc.name, line, block)
		}
		if len(tc.want) == 0 && strings.Contains(block, "Ciphers") {
			t.Errorf("%s: the block names ciphers the client lacks:\n%s", tc.name, block)
		}
	}
}
