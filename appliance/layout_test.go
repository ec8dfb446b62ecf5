package appliance

import (
	"flag"
	"path/filepath"
	"testing"

	"airgapcoder/internal/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestSystemdUnitGolden: the unit files install writes next to the
// appliance: the appliance as the service user, the launcher as root.
func TestSystemdUnitGolden(t *testing.T) {
	t.Parallel()
	const bin, dir = "/var/lib/coder-appliance/current/bin/coder-linux-amd64", "/var/lib/coder-appliance"
	golden.Check(t, filepath.Join("testdata", UnitFile+".golden"), []byte(systemdUnit(bin, dir, "coder")), *update)
	golden.Check(t, filepath.Join("testdata", LauncherUnitFile+".golden"), []byte(launcherUnit(bin, dir)), *update)
}

// TestSystemdQuote: a path with spaces, quotes, % or $ stays one word of
// the command line and means itself.
func TestSystemdQuote(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/var/lib/coder", "/var/lib/coder"},
		{"/srv/my appliance", `"/srv/my appliance"`},
		{"/srv/100%", "/srv/100%%"},
		{"/srv/$HOME", "/srv/$$HOME"},
		{`/srv/a "b"`, `"/srv/a \"b\""`},
	} {
		if got := systemdQuote(tt.in); got != tt.want {
			t.Errorf("systemdQuote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
