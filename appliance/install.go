package appliance

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"airgapcoder/bundle"
	"airgapcoder/certs"
	"airgapcoder/codersdk"

	"airgapcoder/internal/atomicfile"
	"airgapcoder/internal/bytesize"
)

// InstallOptions configure Install.
type InstallOptions struct {
	Bundle string
	Dir    string
	// PublicKey checks the bundle's signature; AllowUnsigned accepts a
	// bundle without one (and no key).
	PublicKey     ed25519.PublicKey
	AllowUnsigned bool
	// Binary is the coder binary the systemd unit runs (default: the
	// current release's, else this one).
	Binary string
	Logger *slog.Logger
	// Now is the clock for the preflight (default time.Now).
	Now func() time.Time
}

// InstallResult says what install did.
type InstallResult struct {
	Release          string
	AlreadyInstalled bool
	Manifest         bundle.Manifest
}

// headroom is the free space kept beyond the unpacked bundle, for the
// database and logs.
const headroom = 1 << 30

// Install verifies a bundle and unpacks it into DIR/releases/<release>, then
// makes it current. Nothing outside a staging folder is written until every
// file's hash has been checked; a bad bundle, an interruption at any point
// or a full disk leaves DIR as it was, and running install again succeeds.
//
// An install is recorded in the audit journal, and so is a refused one on
// a host that already runs a release.
func Install(ctx context.Context, opts InstallOptions) (InstallResult, error) {
	l := Layout{Dir: opts.Dir}
	if dir, err := filepath.Abs(opts.Dir); err == nil {
		l.Dir = dir
	}
	current, _ := l.CurrentRelease()
	res, err := install(ctx, opts, true)
	if err != nil && current == "" {
		return res, err
	}
	op := newOperation(codersdk.AuditActionInstall, res.Release).
		set("bundle", res.Manifest.Name).set("bundle_file", opts.Bundle).set("previous_release", current)
	if opts.PublicKey != nil {
		op.set("signed_by", bundle.KeyID(opts.PublicKey))
	} else {
		op.set("signature", "not checked (--allow-unsigned)")
	}
	op.record(l, opts.logger(), "install of "+bundleDescription(opts.Bundle, res.Release), err)
	return res, err
}

// bundleDescription names a bundle file and, once read, its release.
func bundleDescription(file, release string) string {
	if release == "" {
		return filepath.Base(file)
	}
	return fmt.Sprintf("release %s from %s", release, filepath.Base(file))
}

func (o InstallOptions) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// install unpacks a release and, with activate, makes it current.
func install(ctx context.Context, opts InstallOptions, activate bool) (InstallResult, error) {
	var res InstallResult
	log := opts.logger()
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	if opts.PublicKey == nil && !opts.AllowUnsigned {
		return res, errors.New("install needs --public-key to check the bundle's signature, or --allow-unsigned")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return res, err
	}
	l := Layout{Dir: dir}
	m, info, err := bundle.Inspect(opts.Bundle)
	if err != nil {
		return res, fmt.Errorf("read bundle %s: %w", opts.Bundle, err)
	}
	res.Release, res.Manifest = m.Release, m
	var baseDir string
	if info.Delta != nil {
		if baseDir, err = deltaBase(l, opts.Bundle, info.Delta); err != nil {
			return res, err
		}
	}
	if err := preflightInstall(l, m, info, now()); err != nil {
		return res, fmt.Errorf("preflight: %w", err)
	}
	if err := os.MkdirAll(l.Releases(), 0o755); err != nil {
		return res, fmt.Errorf("create %s: %w", l.Releases(), err)
	}
	cleanStaging(l, log)

	target := l.Release(m.Release)
	if _, err := os.Stat(filepath.Join(target, manifestFile)); err == nil {
		// Already unpacked (a second install of the same bundle): check the
		// copy on disk still matches the new bundle's manifest.
		have, err := readManifest(target)
		if err != nil {
			return res, err
		}
		if !sameFiles(have, m) {
			return res, fmt.Errorf("release %s is already installed with different content; a release name must not be reused (remove %s to replace it)", m.Release, target)
		}
		res.AlreadyInstalled = true
	} else {
		if err := removeUnfinished(l, target, log); err != nil {
			return res, err
		}
		log.Info("verifying and unpacking bundle", "bundle", opts.Bundle, "release", m.Release, "size", info.TotalSize)
		// Extract stages beside target (in DIR/releases) and renames it into
		// place only when every hash has been checked; the manifest file,
		// which says the release is unpacked, is in the staging folder by
		// then, so a kill at any moment leaves target complete or absent.
		if _, err := bundle.ExtractWith(ctx, opts.Bundle, target, bundle.ExtractOptions{
			PublicKey: opts.PublicKey, AllowUnsigned: opts.AllowUnsigned, BaseDir: baseDir,
			Finish: func(staging string, m bundle.Manifest) error {
				b, err := json.MarshalIndent(m, "", "  ")
				if err != nil {
					return err
				}
				return atomicfile.Write(filepath.Join(staging, manifestFile), b, 0o644)
			},
		}); err != nil {
			return res, fmt.Errorf("install %s: %w", opts.Bundle, err)
		}
	}
	if err := finishInstall(l, m, opts, log); err != nil {
		return res, err
	}
	if activate {
		if err := l.Activate(m.Release); err != nil {
			return res, err
		}
	}
	log.Info("release installed", "release", m.Release, "dir", dir, "current", activate)
	return res, nil
}

// finishInstall writes what a release needs beside it: settings, the
// service user, certificates and the systemd unit. Each step is idempotent.
func finishInstall(l Layout, m bundle.Manifest, opts InstallOptions, log *slog.Logger) error {
	cfgExisted := fileExists(filepath.Join(l.Dir, ConfigFile))
	if err := WriteDefaultConfig(l.Dir); err != nil {
		return fmt.Errorf("write %s: %w", ConfigFile, err)
	}
	cfg, err := LoadConfig(l.Dir, nil)
	if err != nil {
		return err
	}
	if !cfgExisted {
		log.Info("wrote settings", "file", filepath.Join(l.Dir, ConfigFile))
	}
	for _, d := range []string{l.Data(), l.Cache()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var bundled []string
	for _, c := range m.Components.Certs {
		bundled = append(bundled, filepath.Join(l.Release(m.Release), c.Path))
	}
	if len(bundled) > 0 {
		if _, err := certs.Import(l.Dir, bundled, certs.Options{}); err != nil {
			return fmt.Errorf("import the bundle's CA certificates: %w", err)
		}
	}
	binary := opts.Binary
	if rel := bundle.CoderPath(runtime.GOOS + "/" + runtime.GOARCH); binary == "" && fileExists(filepath.Join(l.Release(m.Release), rel)) {
		// The release's own coder through the current link: the service
		// follows upgrades and rollbacks.
		binary = filepath.Join(l.Current(), rel)
	}
	if binary == "" {
		if binary, err = os.Executable(); err != nil {
			return err
		}
	}
	if os.Geteuid() == 0 {
		// The service user, its subordinate ids and its folders (after the
		// certificates, which root just wrote).
		if _, _, err := prepareServiceUser(l.Dir, nil); err != nil {
			return err
		}
	}
	if err := atomicfile.Write(filepath.Join(l.Dir, LauncherUnitFile), []byte(launcherUnit(binary, l.Dir)), 0o644); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(l.Dir, UnitFile), []byte(systemdUnit(binary, l.Dir, cfg.ServiceUser)), 0o644)
}

func preflightInstall(l Layout, m bundle.Manifest, info bundle.Info, now time.Time) error {
	var unpacked int64
	for _, f := range m.Files {
		unpacked += f.Size
	}
	need := uint64(unpacked) + headroom
	free, err := freeBytes(l.Dir)
	if err != nil {
		return fmt.Errorf("check free space at %s: %w", l.Dir, err)
	}
	if free < need {
		return fmt.Errorf("not enough free space at %s: %s free, %s needed (unpacked bundle %s + 1 GiB for the database)",
			l.Dir, bytesize.Format(int64(free)), bytesize.Format(int64(need)), bytesize.Format(unpacked))
	}
	if !m.BuildTime.IsZero() && now.Before(m.BuildTime.Add(-24*time.Hour)) {
		return fmt.Errorf("this host's clock (%s) is more than a day behind the bundle's build time (%s): fix the clock, or certificates will not validate",
			now.UTC().Format(time.RFC3339), m.BuildTime.UTC().Format(time.RFC3339))
	}
	_ = info
	// A first install also checks the ports the appliance will listen on
	// (an upgrade or reinstall runs beside the appliance, which holds them).
	if current, _ := l.CurrentRelease(); current == "" {
		cfg, err := LoadConfig(l.Dir, nil)
		if err != nil {
			return err
		}
		for key, addr := range map[string]string{"tls-address": cfg.TLSAddress, "http-address": cfg.HTTPAddress, "mirror-address": cfg.MirrorAddress} {
			if addr == "" || key == "mirror-address" && cfg.IsProxy() { // a proxy runs no mirror
				continue
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("%s %s is not available (%v): free it, or set %s in %s before installing", key, addr, err, key, filepath.Join(l.Dir, ConfigFile))
			}
			ln.Close()
		}
	}
	return nil
}

// removeUnfinished removes target, a release folder without its manifest
// file: an install before this one's fix was killed between unpacking and
// writing the manifest. Such a folder was never made current; an
// install now writes the manifest before the folder gets its name.
func removeUnfinished(l Layout, target string, log *slog.Logger) error {
	entries, err := os.ReadDir(target)
	if err != nil || len(entries) == 0 {
		return nil // absent or empty: Extract takes it as it is
	}
	if current, _ := l.CurrentRelease(); current != "" && l.Release(current) == target {
		return fmt.Errorf("release folder %s is current but has no %s: restore it from a backup, or remove it and install again", target, manifestFile)
	}
	log.Warn("removing a release folder an interrupted install left without its manifest", "dir", target)
	if err := os.RemoveAll(target); err != nil {
		return fmt.Errorf("remove the unfinished release folder %s: %w", target, err)
	}
	return nil
}

// cleanStaging removes what an interrupted install left behind.
func cleanStaging(l Layout, log *slog.Logger) {
	entries, _ := os.ReadDir(l.Releases())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".unverified-") {
			log.Info("removing an interrupted install", "folder", e.Name())
			_ = os.RemoveAll(filepath.Join(l.Releases(), e.Name()))
		}
	}
	_ = os.RemoveAll(l.Staging())
}

const manifestFile = "manifest.json"

func readManifest(releaseDir string) (bundle.Manifest, error) {
	var m bundle.Manifest
	b, err := os.ReadFile(filepath.Join(releaseDir, manifestFile))
	if err != nil {
		return m, fmt.Errorf("read release manifest: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("read release manifest %s: %w", releaseDir, err)
	}
	return m, nil
}

func sameFiles(a, b bundle.Manifest) bool {
	if len(a.Files) != len(b.Files) {
		return false
	}
	for i := range a.Files {
		if a.Files[i].Path != b.Files[i].Path || a.Files[i].SHA256 != b.Files[i].SHA256 {
			return false
		}
	}
	return true
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
