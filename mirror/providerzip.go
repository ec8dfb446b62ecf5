package mirror

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// AddProviderZip stores zipPath, a provider package as its origin registry
// publishes it, unchanged under dir/<hostname>/<namespace>/<type>/ as
// terraform-provider-<type>_<version>_<os>_<arch>.zip, and writes or updates
// index.json and <version>.json with the zip's h1: and zh: hashes, keeping
// the versions and platforms already there. Unlike AddProvider it does not
// repack: the zh: hash stays the one the registry's SHA256SUMS lists, so a
// lock file written from either source agrees with the registry.
//
// The zip must be a readable archive of regular files with safe names and
// hold the provider executable (terraform-provider-<type>…); it is not
// otherwise trusted more than AddProvider trusts a binary: the caller
// verifies it against a signed SHA256SUMS first. Every file is written
// atomically.
func AddProviderZip(dir string, addr ProviderAddress, version string, p Platform, zipPath string) error {
	if err := addProviderZip(dir, addr, version, p, zipPath); err != nil {
		return fmt.Errorf("add provider zip %s %s %s: %w", addr, version, p, err)
	}
	return nil
}

func addProviderZip(dir string, addr ProviderAddress, version string, p Platform, zipPath string) error {
	if err := validateCoordinates(addr, version, p); err != nil {
		return err
	}
	if err := checkProviderZip(zipPath, addr); err != nil {
		return err
	}
	return storeArchive(dir, addr, version, p, func(w io.Writer) error {
		in, err := os.Open(zipPath)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.Copy(w, in)
		return err
	})
}

// checkProviderZip opens the zip and checks that its entries are plain
// relative names and that one of them is the provider executable.
func checkProviderZip(zipPath string, addr ProviderAddress) error {
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Base(zipPath), err)
	}
	defer zr.Close()
	found := false
	for _, f := range zr.File {
		name := f.Name
		if name == "" || strings.Contains(name, `\`) || path.IsAbs(name) || !fs.ValidPath(strings.TrimSuffix(name, "/")) {
			return fmt.Errorf("%s: unsafe entry name %q", filepath.Base(zipPath), name)
		}
		if f.Mode().IsRegular() && strings.HasPrefix(name, "terraform-provider-"+addr.Type) {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%s holds no terraform-provider-%s executable", filepath.Base(zipPath), addr.Type)
	}
	return nil
}

// recordArchive merges one archive into <version>.json and the version into
// index.json of the provider folder pdir.
func recordArchive(pdir, version string, p Platform, a Archive) error {
	var rel Release
	relPath := filepath.Join(pdir, version+".json")
	if err := readJSON(relPath, &rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if rel.Archives == nil {
		rel.Archives = map[string]Archive{}
	}
	rel.Archives[p.String()] = a
	if err := writeJSON(relPath, rel); err != nil {
		return err
	}
	var idx Index
	idxPath := filepath.Join(pdir, "index.json")
	if err := readJSON(idxPath, &idx); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if idx.Versions == nil {
		idx.Versions = map[string]struct{}{}
	}
	idx.Versions[version] = struct{}{}
	return writeJSON(idxPath, idx)
}
