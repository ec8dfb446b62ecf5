package postgres

import (
	"context"
	"fmt"
	"path/filepath"
)

// Repack writes the PostgreSQL installation at installDir (Debian's layout,
// see [Options.InstallDir]; empty means the newest /usr/lib/postgresql/<major>)
// as a zonky-style archive into destDir, under the file name that
// embedded-postgres looks for on this machine
// (embedded-postgres-binaries-<os>-<arch>-<version>.txz). It returns the
// archive's path and the installation's version (MAJOR.MINOR.0). The archive
// is the one [Server.Start] would repack: the same installation gives the
// same bytes, and it still needs the machine's shared libraries. bundle build
// uses it to carry a local installation to the offline host.
func Repack(ctx context.Context, installDir, destDir string) (archive, version string, err error) {
	inst, err := detectInstallation(ctx, installDir)
	if err != nil {
		return "", "", fmt.Errorf("postgres: repack: %w", err)
	}
	archive = filepath.Join(destDir, archiveName(inst.version))
	if err := repack(ctx, inst, archive); err != nil {
		return "", "", fmt.Errorf("postgres: repack %s: %w", inst.dir, err)
	}
	return archive, inst.version, nil
}
