package postgres

import (
	"airgapcoder/internal/atomicfile"
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/xi2/xz"
)

// debianInstallRoot holds Debian's installations, one folder per major.
const debianInstallRoot = "/usr/lib/postgresql"

// unpackPrefix names the temporary folders that unpack renames into place.
const unpackPrefix = ".unpack-"

// requiredBinaries must exist in an unpacked tree; embedded-postgres runs
// bin/initdb and bin/pg_ctl, pg_ctl runs bin/postgres.
var requiredBinaries = []string{"bin/pg_ctl", "bin/initdb", "bin/postgres"}

// archiveName is the file name under which embedded-postgres looks for the
// archive of version in its cache. It follows the library's
// version_strategy.go (zonky's platform names) exactly.
func archiveName(version string) string {
	goos, arch := archivePlatform(runtime.GOOS, runtime.GOARCH, version, linuxMachine, isAlpine)
	return fmt.Sprintf("embedded-postgres-binaries-%s-%s-%s.txz", goos, arch, version)
}

func archivePlatform(goos, arch, version string, machine func() string, alpine func() bool) (string, string) {
	if goos == "linux" {
		switch arch {
		case "arm64":
			arch = "arm64v8"
		case "arm":
			m := machine()
			if strings.HasPrefix(m, "armv7") {
				arch = "arm32v7"
			} else if strings.HasPrefix(m, "armv6") {
				arch = "arm32v6"
			}
		}
		if alpine() {
			arch += "-alpine"
		}
	}
	if goos == "darwin" && arch == "arm64" {
		var major, minor int
		if _, err := fmt.Sscanf(version, "%d.%d", &major, &minor); err == nil && (major < 14 || major == 14 && minor < 2) {
			arch = "amd64"
		} else {
			arch = "arm64v8"
		}
	}
	return goos, arch
}

func linuxMachine() string {
	out, _ := exec.Command("uname", "-m").Output()
	return string(out)
}

func isAlpine() bool {
	_, err := os.Stat("/etc/alpine-release")
	return err == nil
}

// ensureArchive returns the cached archive to run and its version. When
// opts.Version is empty it repacks the local installation into the cache
// unless that was done before.
func ensureArchive(ctx context.Context, opts Options, log *slog.Logger) (archive, version string, err error) {
	if opts.Version != "" {
		archive = filepath.Join(opts.CacheDir, archiveName(opts.Version))
		if _, err := os.Stat(archive); err != nil {
			return "", "", fmt.Errorf("%w: %s: %w; copy that archive there (a bundle carries it), leave the PostgreSQL version empty to repack the machine's installation, or use an external database (--postgres-url)", ErrNoBinaries, archive, err)
		}
		return archive, opts.Version, nil
	}
	inst, err := detectInstallation(ctx, opts.InstallDir)
	if err != nil {
		return "", "", fmt.Errorf("%w: no archive is configured and %w; install PostgreSQL (Debian: apt-get install postgresql), or copy %s into %s and set its version, or use an external database (--postgres-url)",
			ErrNoBinaries, err, archiveName("<version>"), opts.CacheDir)
	}
	archive = filepath.Join(opts.CacheDir, archiveName(inst.version))
	if _, err := os.Stat(archive); err == nil {
		return archive, inst.version, nil
	}
	start := time.Now()
	if err := repack(ctx, inst, archive); err != nil {
		return "", "", fmt.Errorf("postgres: repack %s: %w", inst.dir, err)
	}
	log.Info("repacked the PostgreSQL installation", "install_dir", inst.dir, "version", inst.version, "archive", archive, "took", time.Since(start).Round(time.Millisecond))
	return archive, inst.version, nil
}

// installation is a PostgreSQL installation in Debian's layout.
type installation struct {
	dir      string // <prefix>/lib/postgresql/<major>
	shareDir string // <prefix>/share/postgresql/<major>
	version  string // MAJOR.MINOR.0
}

// detectInstallation finds the installation in dir (or the newest Debian
// one when dir is empty) and asks its postgres binary for the version.
func detectInstallation(ctx context.Context, dir string) (installation, error) {
	if dir == "" {
		d, err := newestDebianInstallation()
		if err != nil {
			return installation{}, err
		}
		dir = d
	}
	postgres := filepath.Join(dir, "bin", "postgres")
	if _, err := os.Stat(postgres); err != nil {
		return installation{}, fmt.Errorf("no installation to repack at %s (%w)", dir, err)
	}
	// PostgreSQL finds its share files relative to the real location of
	// its binaries: from <prefix>/lib/postgresql/<major>/bin it goes to
	// <prefix>/share/postgresql/<major>. The repack keeps both paths.
	share := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(dir))), "share", "postgresql", filepath.Base(dir))
	if _, err := os.Stat(filepath.Join(share, "postgres.bki")); err != nil {
		return installation{}, fmt.Errorf("installation %s has no share files at %s (%w)", dir, share, err)
	}
	// postgres refuses to run as root, except for --version.
	out, err := exec.CommandContext(ctx, postgres, "--version").Output()
	if err != nil {
		return installation{}, fmt.Errorf("run %s --version: %w", postgres, err)
	}
	v, err := parseVersion(string(out))
	if err != nil {
		return installation{}, fmt.Errorf("%s --version: %w", postgres, err)
	}
	return installation{dir: dir, shareDir: share, version: v}, nil
}

func newestDebianInstallation() (string, error) {
	entries, err := os.ReadDir(debianInstallRoot)
	if err != nil {
		return "", fmt.Errorf("no installation to repack under %s (%w)", debianInstallRoot, err)
	}
	best, bestMajor := "", -1
	for _, e := range entries {
		major, err := strconv.Atoi(e.Name())
		if err != nil || major <= bestMajor {
			continue
		}
		if _, err := os.Stat(filepath.Join(debianInstallRoot, e.Name(), "bin", "postgres")); err == nil {
			best, bestMajor = filepath.Join(debianInstallRoot, e.Name()), major
		}
	}
	if best == "" {
		return "", fmt.Errorf("no installation to repack under %s", debianInstallRoot)
	}
	return best, nil
}

var postgresVersion = regexp.MustCompile(`\(PostgreSQL\) ([0-9]+)(?:\.([0-9]+))?`)

// parseVersion turns "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
// into "15.18.0", the three-part form of embedded-postgres and zonky.
func parseVersion(out string) (string, error) {
	m := postgresVersion.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("unexpected output %q", strings.TrimSpace(out))
	}
	minor := m[2]
	if minor == "" {
		minor = "0"
	}
	return m[1] + "." + minor + ".0", nil
}

// repack writes inst as a zonky-style archive at dest: the installation and
// its share files under their own paths (usr/lib/postgresql/15/...,
// usr/share/postgresql/15/...) and bin/<tool> symlinks to the binaries. The
// binaries still need the machine's shared libraries. The archive is written
// to a temporary file, verified, and renamed into place.
func repack(ctx context.Context, inst installation, dest string) (err error) {
	xzPath, err := exec.LookPath("xz")
	if err != nil {
		return fmt.Errorf("repacking needs the xz program (Debian: apt-get install xz-utils): %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".repack-*.txz")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	// The cache is local: speed matters more than size (-0 gives about
	// 19 MB for PostgreSQL 15, -6 saves one more MB at eight times the
	// time).
	cmd := exec.CommandContext(ctx, xzPath, "-0", "-T0", "-c", "-q")
	cmd.Stdout = tmp
	var stderr strings.Builder
	cmd.Stderr = &stderr
	pipe, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start xz: %w", err)
	}
	werr := writeRepack(pipe, inst)
	if cerr := pipe.Close(); werr == nil {
		werr = cerr
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("xz: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if werr != nil {
		return fmt.Errorf("write tar: %w", werr)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := verifyArchive(tmp.Name()); err != nil {
		return fmt.Errorf("verify %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(dest))
}

func writeRepack(w io.Writer, inst installation) error {
	tw := tar.NewWriter(w)
	for _, dir := range []string{inst.dir, inst.shareDir} {
		if err := writeTree(tw, dir); err != nil {
			return err
		}
	}
	// The bin/ links come last.
	entries, err := os.ReadDir(filepath.Join(inst.dir, "bin"))
	if err != nil {
		return err
	}
	binDir := archivePath(filepath.Join(inst.dir, "bin"))
	if err := tw.WriteHeader(dirHeader("bin/")); err != nil {
		return err
	}
	for _, e := range entries {
		h := &tar.Header{
			Typeflag: tar.TypeSymlink,
			Name:     "bin/" + e.Name(),
			Linkname: path.Join("..", binDir, e.Name()),
			Mode:     0o777,
			ModTime:  archiveTime,
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	return tw.Close()
}

// archiveTime is every member's modification time, so that a repack of the
// same installation gives the same bytes.
var archiveTime = time.Unix(0, 0)

// archivePath is the member name of an absolute path: without the leading
// slash, with forward slashes.
func archivePath(p string) string {
	return strings.TrimPrefix(filepath.ToSlash(p), "/")
}

func dirHeader(name string) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: archiveTime}
}

// writeTree adds root and everything under it (directories, regular files,
// symlinks as they are) in lexical order.
func writeTree(tw *tar.Writer, root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := archivePath(p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			return tw.WriteHeader(dirHeader(name + "/"))
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: archiveTime})
		case mode.IsRegular():
			return writeFile(tw, p, name, info)
		default:
			return nil // sockets, devices: nothing PostgreSQL needs
		}
	})
}

func writeFile(tw *tar.Writer, p, name string, info fs.FileInfo) error {
	perm := int64(0o644)
	if info.Mode()&0o111 != 0 {
		perm = 0o755
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: info.Size(), Mode: perm, ModTime: archiveTime}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(tw, f)
	if err == nil && n != info.Size() {
		err = fmt.Errorf("%s changed while it was read", p)
	}
	return err
}

// walkArchive calls fn on each member of an xz-compressed tar archive, in
// order, with a reader of the member's bytes, and stops at fn's first
// error. It decompresses with the decoder that embedded-postgres uses too.
func walkArchive(archive string, fn func(h *tar.Header, r io.Reader) error) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := xz.NewReader(f, 0)
	if err != nil {
		return fmt.Errorf("read %s: %w", archive, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
}

// verifyArchive reads the whole archive and checks that it holds the
// binaries that embedded-postgres runs.
func verifyArchive(archive string) error {
	seen := map[string]bool{}
	err := walkArchive(archive, func(h *tar.Header, r io.Reader) error {
		seen[path.Clean(h.Name)] = true
		_, err := io.Copy(io.Discard, r)
		return err
	})
	if err != nil {
		return err
	}
	for _, b := range requiredBinaries {
		if !seen[b] {
			return fmt.Errorf("archive lacks %s", b)
		}
	}
	return nil
}

// unpack makes sure archive is unpacked in its own folder under
// binariesDir and returns that folder. It unpacks into a temporary folder
// and renames it into place, so the folder is complete whenever it exists.
func unpack(archive, binariesDir string, log *slog.Logger) (string, error) {
	final := filepath.Join(binariesDir, strings.TrimSuffix(filepath.Base(archive), ".txz"))
	if hasBinaries(final) == nil {
		return final, nil
	}
	removeStaleUnpacks(binariesDir, log)
	start := time.Now()
	if err := os.MkdirAll(binariesDir, 0o755); err != nil {
		return "", fmt.Errorf("postgres: unpack %s: %w", archive, err)
	}
	tmp, err := os.MkdirTemp(binariesDir, unpackPrefix)
	if err != nil {
		return "", fmt.Errorf("postgres: unpack %s: %w", archive, err)
	}
	defer os.RemoveAll(tmp) // a no-op after the rename
	if err := extract(archive, tmp); err != nil {
		return "", fmt.Errorf("postgres: unpack %s: %w", archive, err)
	}
	if err := hasBinaries(tmp); err != nil {
		return "", fmt.Errorf("postgres: unpack %s: %w", archive, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another process may have won the race.
		if hasBinaries(final) == nil {
			return final, nil
		}
		return "", fmt.Errorf("postgres: unpack %s: %w", archive, err)
	}
	if err := atomicfile.SyncDir(binariesDir); err != nil {
		return "", fmt.Errorf("postgres: unpack %s: %w", archive, err)
	}
	log.Info("unpacked PostgreSQL", "archive", archive, "dir", final, "took", time.Since(start).Round(time.Millisecond))
	return final, nil
}

func hasBinaries(dir string) error {
	for _, b := range requiredBinaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return fmt.Errorf("archive lacks %s: %w", b, err)
		}
	}
	return nil
}

// removeStaleUnpacks removes temporary folders that a crashed unpack left,
// once they are old enough not to belong to a running one.
func removeStaleUnpacks(binariesDir string, log *slog.Logger) {
	entries, _ := os.ReadDir(binariesDir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), unpackPrefix) {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Hour {
			p := filepath.Join(binariesDir, e.Name())
			log.Info("removing an interrupted unpack", "dir", p)
			_ = os.RemoveAll(p)
		}
	}
}

// extract unpacks the archive's directories, regular files, symlinks and
// hard links into dir. Through os.Root no member and no symlink can write
// outside dir. Every directory is 0755 and every file 0644 or 0755 whatever
// the umask, so that the unprivileged PostgreSQL user can read them.
func extract(archive, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	err = walkArchive(archive, func(h *tar.Header, r io.Reader) error {
		if err := extractMember(root, r, h); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			err = os.Chmod(p, 0o755)
		}
		return err
	})
}

func extractMember(root *os.Root, r io.Reader, h *tar.Header) error {
	name, err := memberName(h.Name)
	if err != nil || name == "." {
		return err
	}
	if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return root.MkdirAll(name, 0o755)
	case tar.TypeReg:
		perm := os.FileMode(0o644)
		if h.Mode&0o111 != 0 {
			perm = 0o755
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if err == nil {
			err = f.Chmod(perm)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	case tar.TypeSymlink:
		_ = root.Remove(name)
		return root.Symlink(h.Linkname, name)
	case tar.TypeLink:
		target, err := memberName(h.Linkname)
		if err != nil {
			return err
		}
		_ = root.Remove(name)
		return root.Link(target, name)
	default:
		return nil
	}
}

// memberName turns a member name into a clean relative path, refusing
// absolute names and names that climb out of the archive.
func memberName(name string) (string, error) {
	clean := path.Clean(strings.TrimPrefix(name, "./"))
	if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("unsafe member name %q", name)
	}
	return filepath.FromSlash(clean), nil
}
