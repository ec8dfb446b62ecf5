package appliance

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"airgapcoder/internal/atomicfile"
)

// containerCertDirs are where container engines on this host look for a
// registry's CA: containers/image (Podman, Buildah, Skopeo, CRI-O) reads
// every *.crt in /etc/containers/certs.d/<registry>/, Docker reads
// /etc/docker/certs.d/<registry>/ca.crt. An engine is taken to be installed
// when the folder above certs.d exists. Run as the service user, the
// appliance's workspaces use rootless podman, which also reads
// $HOME/.config/containers/certs.d: the service user's home.
func containerCertDirs(l Layout) []string {
	if os.Geteuid() != 0 {
		user := filepath.Join(l.ServiceHome(), ".config", "containers")
		if _, err := exec.LookPath("podman"); err == nil {
			_ = os.MkdirAll(user, 0o700)
		}
		return []string{filepath.Join(user, "certs.d")}
	}
	return []string{"/etc/containers/certs.d", "/etc/docker/certs.d"}
}

// trustForContainers writes the CA bundle caFile (the appliance CA and the
// imported ones) as <dir>/<registry>/ca.crt for every dir of certDirs whose
// engine is installed, so that container workspaces pull the bundled images
// from the mirror at registry (host:port) with its certificate trusted and
// no --tls-verify=false. Where it may not write (/etc as the service user)
// it logs what an administrator should do. It returns the files it wrote.
func trustForContainers(log *slog.Logger, registry, caFile string, certDirs []string) ([]string, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("trust the mirror for container engines: %w", err)
	}
	var wrote []string
	for _, dir := range certDirs {
		if _, err := os.Stat(filepath.Dir(dir)); err != nil {
			continue // that engine is not installed
		}
		path := filepath.Join(dir, registry, "ca.crt")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); errors.Is(err, fs.ErrPermission) {
			log.Warn("container engines will not trust the mirror: run as root, or copy the CA yourself",
				"ca", caFile, "to", path)
			continue
		} else if err != nil {
			return wrote, fmt.Errorf("trust the mirror for container engines: %w", err)
		}
		if err := atomicfile.Write(path, ca, 0o644); err != nil {
			return wrote, fmt.Errorf("trust the mirror for container engines: %w", err)
		}
		wrote = append(wrote, path)
	}
	if len(wrote) > 0 {
		log.Info("container engines trust the mirror", "registry", registry, "files", wrote)
	}
	return wrote, nil
}
