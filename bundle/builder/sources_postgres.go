package builder

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"airgapcoder/bundle"
	"airgapcoder/internal/buildinfo"
	"airgapcoder/mirror"
	"airgapcoder/postgres"
)

// fetchPostgres puts embedded-postgres archives under postgres/, named as
// embedded-postgres looks for them in its cache
// (embedded-postgres-binaries-<os>-<arch>-<version>.txz, zonky's platform
// names): zonky's jars from a Maven repository for every platform (the jar's
// .sha256 checked, the .txz inside taken out), or a repack of a local
// installation for the build host's platform.
func (b *builder) fetchPostgres(ctx context.Context) error {
	src := b.cfg.Postgres
	if src == nil {
		return nil
	}
	if src.Path != "" {
		return b.repackPostgres(ctx, src)
	}
	pg := &bundle.Postgres{Version: src.Version, Source: "maven"}
	var mu = &b.mu
	g := newGroup(ctx)
	for _, p := range b.cfg.Platforms {
		g.Go(func(ctx context.Context) error {
			bin, err := b.mavenPostgres(ctx, src, p)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", src.Origin, slashPlatform(p), err)
			}
			mu.Lock()
			pg.Archives = append(pg.Archives, bin)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	b.mu.Lock()
	b.comp.Postgres = pg
	b.mu.Unlock()
	return nil
}

// zonkyPlatform is zonky's name of a platform, as embedded-postgres
// spells it in archive names.
func zonkyPlatform(p mirror.Platform, version string) string {
	arch := p.Arch
	if arch == "arm64" {
		arch = "arm64v8"
	}
	if p.OS == "darwin" && p.Arch == "arm64" {
		var major, minor int
		if _, err := fmt.Sscanf(version, "%d.%d", &major, &minor); err == nil && (major < 14 || major == 14 && minor < 2) {
			arch = "amd64" // no native build before 14.2; runs under Rosetta
		}
	}
	return p.OS + "-" + arch
}

func (b *builder) mavenPostgres(ctx context.Context, src *PostgresSource, p mirror.Platform) (bundle.Binary, error) {
	zp := zonkyPlatform(p, src.Version)
	artifact := "embedded-postgres-binaries-" + zp
	jarURL := fmt.Sprintf("%sio/zonky/test/postgres/%s/%s/%s-%s.jar", src.RepositoryURL, artifact, src.Version, artifact, src.Version)
	sumText, err := b.getSmall(ctx, jarURL+".sha256", 4096)
	if err != nil {
		return bundle.Binary{}, fmt.Errorf("checksum of the jar: %w", err)
	}
	fields := strings.Fields(string(sumText))
	if len(fields) == 0 || !isSHA256Hex(strings.ToLower(fields[0])) {
		return bundle.Binary{}, fmt.Errorf("%s.sha256 holds no sha256", redactURL(jarURL))
	}
	want := "sha256:" + strings.ToLower(fields[0])
	blob, err := b.fetchBlob(ctx, fetchRequest{want: want, kind: "maven", key: jarURL, open: httpOpener(b.client, jarURL)})
	if err != nil {
		return bundle.Binary{}, fmt.Errorf("%s: %w", redactURL(jarURL), err)
	}
	if err := verifyCached(blob); err != nil {
		return bundle.Binary{}, err
	}
	name := artifact + "-" + src.Version + ".txz"
	rel := bundle.PostgresPath(name)
	sum, err := b.stageJarArchive(blob.Path, rel)
	if err != nil {
		return bundle.Binary{}, fmt.Errorf("%s: %w", redactURL(jarURL), err)
	}
	b.progress.logf("postgres %s %s (maven)", src.Version, slashPlatform(p))
	return bundle.Binary{Platform: slashPlatform(p), Path: rel, Version: src.Version, SHA256: sum}, nil
}

// stageJarArchive copies the one .txz inside a zonky jar to rel.
func (b *builder) stageJarArchive(jar, rel string) (string, error) {
	zr, err := zip.OpenReader(jar)
	if err != nil {
		return "", fmt.Errorf("read the jar: %w", err)
	}
	defer zr.Close()
	var txz *zip.File
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, ".txz") {
			if txz != nil {
				return "", fmt.Errorf("the jar holds more than one .txz (%s, %s)", txz.Name, f.Name)
			}
			txz = f
		}
	}
	if txz == nil {
		return "", fmt.Errorf("the jar holds no .txz archive")
	}
	rc, err := txz.Open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	return b.stageWrite(rel, 0o644, func(w io.Writer) error {
		head := &headCapture{}
		if _, err := io.Copy(io.MultiWriter(w, head), rc); err != nil {
			return fmt.Errorf("unpack %s: %w", txz.Name, err)
		}
		if !bytes.HasPrefix(head.b, []byte("\xfd7zXZ\x00")) {
			return fmt.Errorf("%s in the jar is not xz-compressed", txz.Name)
		}
		return nil
	})
}

// headCapture keeps the first bytes written to it.
type headCapture struct{ b []byte }

func (h *headCapture) Write(p []byte) (int, error) {
	if n := 16 - len(h.b); n > 0 {
		h.b = append(h.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

// repackPostgres repacks a local installation (see postgres.Repack), or
// takes the repack an earlier build made of the same files from the cache.
func (b *builder) repackPostgres(ctx context.Context, src *PostgresSource) error {
	host := hostPlatform()
	if !slices.Contains(b.cfg.Platforms, host) {
		return fmt.Errorf("%s: a local PostgreSQL can be bundled for this host's platform only (%s), which platforms does not list", src.Origin, slashPlatform(host))
	}
	b.warnHostOnly(src.Origin, "PostgreSQL")
	fp, err := installFingerprint(src.Path)
	if err != nil {
		return fmt.Errorf("%s: %w", src.Origin, err)
	}
	key := buildinfo.Version() + " " + src.Path + " " + fp
	blob, ok := b.cache.lookup("postgres-repack", key)
	if ok && verifyCached(blob) == nil {
		b.hits.Add(1)
		blob.Checked = true
	} else {
		work, err := b.cache.tempDir()
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		archive, _, err := postgres.Repack(ctx, src.Path, work)
		if err != nil {
			return fmt.Errorf("%s: %w", src.Origin, err)
		}
		if blob, err = b.cache.importFile(archive); err != nil {
			return err
		}
		blob.Name = filepath.Base(archive)
		if err := b.cache.remember("postgres-repack", key, blob); err != nil {
			return err
		}
	}
	// embedded-postgres-binaries-<os>-<arch>-<version>.txz
	version := strings.TrimSuffix(blob.Name[strings.LastIndexByte(blob.Name, '-')+1:], ".txz")
	if !strings.HasPrefix(blob.Name, "embedded-postgres-binaries-") || !postgresVersion.MatchString(version) {
		return fmt.Errorf("%s: unexpected archive name %q", src.Origin, blob.Name)
	}
	if src.Version != "" && src.Version != version {
		return fmt.Errorf("%s: the installation at %s is PostgreSQL %s, not %s", src.Origin, src.Path, version, src.Version)
	}
	rel := bundle.PostgresPath(blob.Name)
	if err := b.stageBlob(blob, rel); err != nil {
		return fmt.Errorf("%s: %w", src.Origin, err)
	}
	plat := slashPlatform(host)
	b.mu.Lock()
	b.comp.Postgres = &bundle.Postgres{Version: version, Source: "local", Archives: []bundle.Binary{{Platform: plat, Path: rel, Version: version, SHA256: strings.TrimPrefix(blob.Digest, "sha256:")}}}
	b.mu.Unlock()
	b.progress.logf("postgres %s %s (repacked %s)", version, plat, src.Path)
	return nil
}

// installFingerprint hashes the names, sizes, modes and modification
// times of the files of a Debian-layout installation and its share folder:
// when it changes (a minor upgrade), the repack is made again.
func installFingerprint(dir string) (string, error) {
	share := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(dir))), "share", "postgresql", filepath.Base(dir))
	h := sha256.New()
	for _, root := range []string{dir, share} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s %d %o %d\n", p, info.Size(), info.Mode(), info.ModTime().UnixNano())
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("read the installation: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
