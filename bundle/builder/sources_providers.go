package builder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"golang.org/x/mod/semver"

	"airgapcoder/bundle"
	"airgapcoder/mirror"
)

// Providers come from a registry, through the provider registry protocol,
// or from a local folder in `terraform providers mirror` layout, and end
// up in one provider tree under providers/ (see package mirror).
//
// Trust, for a registry: the registry's answer to the download request
// names the zip, a SHA256SUMS file, its detached GPG signature and the
// public keys that may have made it. The signature must verify with one of
// those keys (github.com/ProtonMail/go-crypto/openpgp), the zip's SHA-256
// must be the one SHA256SUMS lists for its file name (and the one the
// download answer gives), and only then is the zip stored, byte for byte
// (mirror.AddProviderZip). As in Terraform, the keys come from the
// registry itself: the trust is in the registry's TLS certificate and the
// signature binds the zip to what the registry published. For a folder, the
// zips must match the zh: hashes its <version>.json records.

// compareSemver orders versions written without a leading "v".
func compareSemver(a, b string) int { return semver.Compare("v"+a, "v"+b) }

// providerRecord is one provider package in the mirror.
type providerRecord struct {
	origin   Origin
	upstream string
	hashes   []string // h1:, zh:
}

// recordProvider notes a package stored in the mirror; a second source of
// the same address, version and platform is an error.
func (b *builder) recordProvider(addr mirror.ProviderAddress, version string, p mirror.Platform, rec providerRecord) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.providers == nil {
		b.providers = map[string]map[string]map[string]providerRecord{}
	}
	byVersion := b.providers[addr.String()]
	if byVersion == nil {
		byVersion = map[string]map[string]providerRecord{}
		b.providers[addr.String()] = byVersion
	}
	byPlatform := byVersion[version]
	if byPlatform == nil {
		byPlatform = map[string]providerRecord{}
		byVersion[version] = byPlatform
	}
	plat := slashPlatform(p)
	if first, dup := byPlatform[plat]; dup {
		return fmt.Errorf("%s: %s %s %s is also given by %s", rec.origin, addr, version, plat, first.origin)
	}
	byPlatform[plat] = rec
	return nil
}

// providerComponents turns the records into the manifest's providers and
// the hashes templates' lock files use.
func (b *builder) providerComponents() {
	for addr, byVersion := range b.providers {
		hashes := map[string]map[string][]string{}
		for version, byPlatform := range byVersion {
			c := bundle.Provider{Source: addr, Version: version, Hashes: map[string][]string{}}
			hashes[version] = map[string][]string{}
			for plat, rec := range byPlatform {
				c.Platforms = append(c.Platforms, plat)
				c.Hashes[plat] = rec.hashes
				hashes[version][plat] = rec.hashes
				if c.Upstream == "" || rec.upstream < c.Upstream {
					c.Upstream = rec.upstream
				}
			}
			slices.Sort(c.Platforms)
			b.comp.Providers = append(b.comp.Providers, c)
		}
		b.providerHashes[addr] = hashes
	}
}

func (b *builder) fetchProviders(ctx context.Context) error {
	g := newGroup(ctx)
	for i := range b.cfg.Providers {
		src := &b.cfg.Providers[i]
		g.Go(func(ctx context.Context) error {
			if src.Path != "" {
				return b.copyProviderFolder(ctx, src)
			}
			return b.registryProvider(ctx, src)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	b.mu.Lock()
	b.providerComponents()
	b.mu.Unlock()
	return nil
}

// serviceDiscovery reads https://<host>/.well-known/terraform.json and
// returns the base URL of service (providers.v1, modules.v1), ending in "/".
func (b *builder) serviceDiscovery(ctx context.Context, host, service string) (*url.URL, error) {
	disco, err := url.Parse("https://" + host + "/.well-known/terraform.json")
	if err != nil {
		return nil, err
	}
	body, err := b.getSmall(ctx, disco.String(), 1<<20)
	if err != nil {
		return nil, fmt.Errorf("service discovery: %w", err)
	}
	var services map[string]any
	if err := json.Unmarshal(body, &services); err != nil {
		return nil, fmt.Errorf("service discovery: %s: %w", disco, err)
	}
	s, ok := services[service].(string)
	if !ok {
		return nil, fmt.Errorf("service discovery: %s offers no %s service", host, service)
	}
	base, err := disco.Parse(s)
	if err != nil || (base.Scheme != "https") {
		return nil, fmt.Errorf("service discovery: %s %q is not an https URL", service, s)
	}
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
	}
	return base, nil
}

func (b *builder) getJSON(ctx context.Context, u string, v any) error {
	body, err := b.getSmall(ctx, u, 4<<20)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode %s: %w", redactURL(u), err)
	}
	return nil
}

// registryVersions is the answer of …/<ns>/<type>/versions.
type registryVersions struct {
	Versions []registryVersion `json:"versions"`
}

type registryVersion struct {
	Version   string             `json:"version"`
	Platforms []registryPlatform `json:"platforms"`
}

type registryPlatform struct {
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

// registryDownload is the answer of …/<version>/download/<os>/<arch>.
type registryDownload struct {
	OS                  string `json:"os"`
	Arch                string `json:"arch"`
	Filename            string `json:"filename"`
	DownloadURL         string `json:"download_url"`
	ShasumsURL          string `json:"shasums_url"`
	ShasumsSignatureURL string `json:"shasums_signature_url"`
	Shasum              string `json:"shasum"`
	SigningKeys         struct {
		GPGPublicKeys []struct {
			KeyID      string `json:"key_id"`
			ASCIIArmor string `json:"ascii_armor"`
		} `json:"gpg_public_keys"`
	} `json:"signing_keys"`
}

func (b *builder) registryProvider(ctx context.Context, src *ProviderSource) error {
	addr := src.Source
	fail := func(err error) error { return fmt.Errorf("%s: %s: %w", src.Origin, addr, err) }
	base, err := b.serviceDiscovery(ctx, addr.Hostname, "providers.v1")
	if err != nil {
		return fail(err)
	}
	provider, err := base.Parse(url.PathEscape(addr.Namespace) + "/" + url.PathEscape(addr.Type) + "/")
	if err != nil {
		return fail(err)
	}
	var versions registryVersions
	if err := b.getJSON(ctx, provider.String()+"versions", &versions); err != nil {
		return fail(fmt.Errorf("list versions: %w", err))
	}
	g := newGroup(ctx)
	for _, v := range src.Versions {
		i := slices.IndexFunc(versions.Versions, func(x registryVersion) bool { return x.Version == v })
		if i < 0 {
			var offered []string
			for _, x := range versions.Versions {
				offered = append(offered, x.Version)
			}
			slices.SortFunc(offered, compareSemver)
			return fail(fmt.Errorf("the registry has no version %s (it has %s)", v, strings.Join(lastN(offered, 10), ", ")))
		}
		offered := versions.Versions[i].Platforms
		for _, p := range b.cfg.Platforms {
			if len(offered) > 0 && !slices.ContainsFunc(offered, func(o registryPlatform) bool { return o.OS == p.OS && o.Arch == p.Arch }) {
				return fail(fmt.Errorf("version %s has no %s build", v, slashPlatform(p)))
			}
			g.Go(func(ctx context.Context) error {
				if err := b.registryPackage(ctx, src, provider, v, p); err != nil {
					return fmt.Errorf("%s: %s %s %s: %w", src.Origin, addr, v, slashPlatform(p), err)
				}
				return nil
			})
		}
	}
	return g.Wait()
}

func lastN(s []string, n int) []string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// registryPackage fetches, verifies and stores one provider package.
func (b *builder) registryPackage(ctx context.Context, src *ProviderSource, provider *url.URL, version string, p mirror.Platform) error {
	dlURL, err := provider.Parse(url.PathEscape(version) + "/download/" + p.OS + "/" + p.Arch)
	if err != nil {
		return err
	}
	var dl registryDownload
	if err := b.getJSON(ctx, dlURL.String(), &dl); err != nil {
		return err
	}
	if dl.OS != p.OS || dl.Arch != p.Arch {
		return fmt.Errorf("the registry answered with a package for %s_%s", dl.OS, dl.Arch)
	}
	if dl.Filename == "" || strings.ContainsAny(dl.Filename, `/\`) || !strings.HasSuffix(dl.Filename, ".zip") {
		return fmt.Errorf("the registry names the package %q, not a zip file name", dl.Filename)
	}
	resolve := func(what, s string) (string, error) {
		u, err := dlURL.Parse(s)
		if err != nil || s == "" || (u.Scheme != "https") {
			return "", fmt.Errorf("the registry gives %s %q, not an https URL", what, s)
		}
		return u.String(), nil
	}
	zipURL, err := resolve("download_url", dl.DownloadURL)
	if err != nil {
		return err
	}
	sumsURL, err := resolve("shasums_url", dl.ShasumsURL)
	if err != nil {
		return err
	}
	sigURL, err := resolve("shasums_signature_url", dl.ShasumsSignatureURL)
	if err != nil {
		return err
	}
	sums, err := b.getSmall(ctx, sumsURL, 1<<20)
	if err != nil {
		return fmt.Errorf("SHA256SUMS: %w", err)
	}
	sig, err := b.getSmall(ctx, sigURL, 1<<16)
	if err != nil {
		return fmt.Errorf("SHA256SUMS signature: %w", err)
	}
	if err := checkSHA256SUMSSignature(sums, sig, dl); err != nil {
		return err
	}
	want, err := sumFor(sums, dl.Filename)
	if err != nil {
		return err
	}
	if dl.Shasum != "" && !strings.EqualFold(dl.Shasum, want) {
		return fmt.Errorf("the registry's shasum %s for %s differs from the signed SHA256SUMS (%s)", dl.Shasum, dl.Filename, want)
	}
	blob, err := b.fetchBlob(ctx, fetchRequest{want: "sha256:" + want, kind: "provider", key: zipURL, open: httpOpener(b.client, zipURL)})
	var mismatch *DigestMismatchError
	if errors.As(err, &mismatch) {
		return fmt.Errorf("%s does not match the signed SHA256SUMS: its sha256 is %s, SHA256SUMS says %s", dl.Filename, strings.TrimPrefix(mismatch.Got, "sha256:"), want)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", dl.Filename, err)
	}
	if err := verifyCached(blob); err != nil {
		return err
	}
	hashes, err := b.storeProviderZip(src.Source, version, p, blob.Path)
	if err != nil {
		return err
	}
	b.progress.logf("provider %s %s %s", src.Source, version, slashPlatform(p))
	return b.recordProvider(src.Source, version, p, providerRecord{origin: src.Origin, upstream: strings.TrimSuffix(provider.String(), "/"), hashes: hashes})
}

// checkSHA256SUMSSignature checks the detached signature of SHA256SUMS
// with the keys the registry announced.
func checkSHA256SUMSSignature(sums, sig []byte, dl registryDownload) error {
	if len(dl.SigningKeys.GPGPublicKeys) == 0 {
		return errors.New("the registry announces no signing key, so SHA256SUMS cannot be verified")
	}
	var keyring openpgp.EntityList
	var ids []string
	for _, k := range dl.SigningKeys.GPGPublicKeys {
		keys, err := openpgp.ReadArmoredKeyRing(strings.NewReader(k.ASCIIArmor))
		if err != nil {
			return fmt.Errorf("read the registry's signing key %s: %w", k.KeyID, err)
		}
		keyring = append(keyring, keys...)
		ids = append(ids, k.KeyID)
	}
	if _, err := openpgp.CheckDetachedSignature(keyring, bytes.NewReader(sums), bytes.NewReader(sig), nil); err != nil {
		return fmt.Errorf("SHA256SUMS signature does not verify with the registry's signing key %s: %w", strings.Join(ids, ", "), err)
	}
	return nil
}

// sumFor returns the hex sha256 SHA256SUMS lists for file.
func sumFor(sums []byte, file string) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && strings.TrimPrefix(f[1], "*") == file {
			h := strings.ToLower(f[0])
			if !isSHA256Hex(h) {
				return "", fmt.Errorf("SHA256SUMS lists %q for %s, not a sha256", f[0], file)
			}
			return h, nil
		}
	}
	return "", fmt.Errorf("the signed SHA256SUMS does not list %s", file)
}

// storeProviderZip adds a zip to the payload's provider tree and returns
// its h1: and zh: hashes.
func (b *builder) storeProviderZip(addr mirror.ProviderAddress, version string, p mirror.Platform, zipPath string) ([]string, error) {
	dir, err := b.payloadPath(bundle.DirProviders + "/x")
	if err != nil {
		return nil, err
	}
	dir = filepath.Dir(dir)
	b.providerMu.Lock()
	defer b.providerMu.Unlock()
	if err := mirror.AddProviderZip(dir, addr, version, p, zipPath); err != nil {
		return nil, err
	}
	rel, err := mirror.ReadRelease(dir, addr, version)
	if err != nil {
		return nil, err
	}
	return slices.Clone(rel.Archives[p.String()].Hashes), nil
}

// copyProviderFolder copies the packages of a local provider tree for the
// bundle's platforms, checking each zip against the zh: (and h1:) hashes
// its <version>.json records.
func (b *builder) copyProviderFolder(ctx context.Context, src *ProviderSource) error {
	indexes, _ := filepath.Glob(filepath.Join(src.Path, "*", "*", "*", "index.json"))
	if len(indexes) == 0 {
		return fmt.Errorf("%s: %s holds no provider in the packed mirror layout (<host>/<namespace>/<type>/index.json)", src.Origin, src.Path)
	}
	slices.Sort(indexes)
	for _, idxPath := range indexes {
		rel, _ := filepath.Rel(src.Path, filepath.Dir(idxPath))
		addr, err := mirror.ParseProviderAddress(filepath.ToSlash(rel))
		if err != nil {
			return fmt.Errorf("%s: %s: %w", src.Origin, rel, err)
		}
		idx, err := mirror.ReadIndex(src.Path, addr)
		if err != nil {
			return fmt.Errorf("%s: %w", src.Origin, err)
		}
		versions := make([]string, 0, len(idx.Versions))
		for v := range idx.Versions {
			versions = append(versions, v)
		}
		slices.SortFunc(versions, compareSemver)
		for _, v := range versions {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := b.copyProviderVersion(src, addr, v); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *builder) copyProviderVersion(src *ProviderSource, addr mirror.ProviderAddress, version string) error {
	fail := func(err error) error { return fmt.Errorf("%s: %s %s: %w", src.Origin, addr, version, err) }
	rel, err := mirror.ReadRelease(src.Path, addr, version)
	if err != nil {
		return fail(err)
	}
	var missing []string
	stored := 0
	for _, p := range b.cfg.Platforms {
		a, ok := rel.Archives[p.String()]
		if !ok {
			missing = append(missing, slashPlatform(p))
			continue
		}
		if a.URL == "" || strings.ContainsAny(a.URL, `/\`) || a.URL == ".." {
			return fail(fmt.Errorf("%s: archive URL %q is not a file name beside %s.json", slashPlatform(p), a.URL, version))
		}
		zipPath := filepath.Join(mirror.ProviderDir(src.Path, addr), a.URL)
		h1, zh, err := mirror.Hashes(zipPath)
		if err != nil {
			return fail(err)
		}
		var zhs, h1s []string
		for _, h := range a.Hashes {
			switch {
			case strings.HasPrefix(h, "zh:"):
				zhs = append(zhs, h)
			case strings.HasPrefix(h, "h1:"):
				h1s = append(h1s, h)
			}
		}
		switch {
		case len(zhs) == 0:
			return fail(fmt.Errorf("%s.json lists no zh: hash for %s to check %s against", version, p, a.URL))
		case !slices.Contains(zhs, zh):
			return fail(fmt.Errorf("%s does not match %s.json: its hash is %s, the file says %s", a.URL, version, zh, strings.Join(zhs, ", ")))
		case len(h1s) > 0 && !slices.Contains(h1s, h1):
			return fail(fmt.Errorf("%s does not match %s.json: its hash is %s, the file says %s", a.URL, version, h1, strings.Join(h1s, ", ")))
		}
		hashes, err := b.storeProviderZip(addr, version, p, zipPath)
		if err != nil {
			return fail(err)
		}
		if err := b.recordProvider(addr, version, p, providerRecord{origin: src.Origin, upstream: "file://" + filepath.ToSlash(src.Path), hashes: hashes}); err != nil {
			return err
		}
		stored++
	}
	if stored == 0 {
		return fail(fmt.Errorf("no package for any platform the bundle lists (%s.json has %s)", version, strings.Join(mapKeys(rel.Archives), ", ")))
	}
	if len(missing) > 0 {
		b.progress.logf("%s: %s %s has no package for %s in %s; terraform there cannot install it", src.Origin, addr, version, strings.Join(missing, ", "), src.Path)
	}
	b.progress.logf("provider %s %s (from %s)", addr, version, src.Path)
	return nil
}

func mapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
