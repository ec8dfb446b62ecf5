package provisionerd

import (
	"fmt"
	"strings"
)

// cliConfig is the CLI configuration each job gets: the mirror is the only
// installation method (no direct block), so terraform never reaches a
// registry.
func cliConfig(mirror, pluginCache string) string {
	var b strings.Builder
	b.WriteString("disable_checkpoint = true\n")
	fmt.Fprintf(&b, "plugin_cache_dir = %q\n", pluginCache)
	b.WriteString("provider_installation {\n")
	switch {
	case strings.HasPrefix(mirror, "https://"):
		fmt.Fprintf(&b, "  network_mirror {\n    url = %q\n  }\n", mirror)
	case mirror != "":
		fmt.Fprintf(&b, "  filesystem_mirror {\n    path = %q\n  }\n", mirror)
	default:
		// No mirror: nothing may be installed at all.
		b.WriteString("  filesystem_mirror {\n    path = \"/nonexistent/coder-provider-mirror\"\n  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}
