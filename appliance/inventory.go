package appliance

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"airgapcoder/bundle"
)

// Inventory describes the appliance's current release for a delta build on
// the connected side (bundle.Inventory): its manifest, which lists the
// digest of every file it holds. It carries no secret and no site data.
func Inventory(dir string) (bundle.Inventory, error) {
	l := Layout{Dir: dir}
	current, err := l.CurrentRelease()
	if err != nil {
		return bundle.Inventory{}, err
	}
	if current == "" {
		return bundle.Inventory{}, fmt.Errorf("nothing is installed in %s: there is nothing to build a delta against", dir)
	}
	m, err := readManifest(l.Release(current))
	if err != nil {
		return bundle.Inventory{}, err
	}
	return bundle.NewInventory(m), nil
}

// deltaBase checks that the release a delta bundle needs is installed, with
// exactly the content the delta was built against, and returns its folder.
// It runs before anything is written.
func deltaBase(l Layout, bundleFile string, d *bundle.Delta) (string, error) {
	dir := l.Release(d.Base.Release)
	have, err := readManifest(dir)
	if err == nil && have.Name == d.Base.Name && have.FilesDigest() == d.Base.FilesDigest {
		return dir, nil
	}
	why := "is not installed"
	if err == nil {
		why = "is installed with other content (files digest " + have.FilesDigest() + ", the delta wants " + d.Base.FilesDigest + ")"
	}
	return "", fmt.Errorf("%s is a delta bundle against %s %s, which %s in %s (installed: %s): install the full bundle, or build a delta against this appliance's inventory (coder appliance inventory --dir %s)",
		filepath.Base(bundleFile), d.Base.Name, d.Base.Release, why, l.Dir, installedReleases(l), l.Dir)
}

// installedReleases lists the releases in DIR/releases, or "none".
func installedReleases(l Layout) string {
	entries, _ := os.ReadDir(l.Releases())
	var names []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return "none"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
