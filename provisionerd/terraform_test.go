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
// registry; module hosts resolve to the module mirror.
func TestCLIConfigGolden(t *testing.T) {
	t.Parallel()
	const cache = "/var/cache/coder/provisionerd/plugin-cache-fake"
	tests := []struct {
		name, mirror, modules string
		hosts                 []string
	}{
		{"network_mirror", "https://mirror.example.internal:8443/providers/", "", nil},
		{"filesystem_mirror", "/opt/coder-appliance/current/providers", "", nil},
		{"no_mirror", "", "", nil},
		{"module_hosts", "/opt/coder-appliance/current/providers", "https://127.0.0.1:8443/terraform/modules/", []string{"registry.coder.com", "registry.terraform.io"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := cliConfig(tt.mirror, cache, tt.modules, tt.hosts)
			golden.Check(t, filepath.Join("testdata", "cliconfig_"+tt.name+".golden"), []byte(got), *update)
		})
	}
}
