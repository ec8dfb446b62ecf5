package provisionerd

import (
	"flag"
	"path/filepath"
	"testing"

	"airgapcoder/internal/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestCLIConfigGolden: the Terraform CLI configuration a job gets, for each
// kind of provider mirror. Whatever the kind, the mirror is the only
// installation method: there is no direct block, so terraform never asks a
// registry.
func TestCLIConfigGolden(t *testing.T) {
	t.Parallel()
	const cache = "/var/cache/coder/provisionerd/plugin-cache-fake"
	tests := []struct {
		name, mirror string
	}{
		{"network_mirror", "https://mirror.example.internal:8443/providers/"},
		{"filesystem_mirror", "/opt/coder-appliance/current/providers"},
		{"no_mirror", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := cliConfig(tt.mirror, cache)
			golden.Check(t, filepath.Join("testdata", "cliconfig_"+tt.name+".golden"), []byte(got), *update)
		})
	}
}
