package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/hc-install/product"
	"github.com/hashicorp/hc-install/releases"

	"airgapcoder/bundle"
	"airgapcoder/mirror"
	"airgapcoder/terraform"
)

// releasesHost is HashiCorp's releases site; a registries: entry for it
// points hc-install at a mirror of the same layout.
const releasesHost = "releases.hashicorp.com"

// fetchTerraform puts the pinned terraform at terraform/<os>_<arch>/terraform
// for the build host's platform: a local binary checked to be exactly the
// version (by running `terraform version` as provisionerd does, with
// CHECKPOINT_DISABLE=1), or HashiCorp's release, downloaded and verified
// against its GPG-signed SHA256SUMS by hc-install. Both can only serve the
// build host's platform; other platforms get no terraform, which the build
// says.
func (b *builder) fetchTerraform(ctx context.Context) error {
	src := b.cfg.Terraform
	if src == nil {
		return nil
	}
	host := hostPlatform()
	if !slices.Contains(b.cfg.Platforms, host) {
		return fmt.Errorf("%s: terraform can be bundled for this host's platform only (%s), which platforms does not list", src.Origin, slashPlatform(host))
	}
	b.warnHostOnly(src.Origin, "terraform")
	tf := &bundle.Terraform{Version: src.Version}
	var bin string
	if src.Path != "" {
		path, err := terraform.Find(ctx, terraform.Options{Path: src.Path, Version: src.Version})
		if err != nil {
			return fmt.Errorf("%s: %w", src.Origin, err)
		}
		bin, tf.Source = path, "local"
	} else {
		blob, err := b.terraformRelease(ctx, src, host)
		if err != nil {
			return fmt.Errorf("%s: terraform %s from releases: %w", src.Origin, src.Version, err)
		}
		bin, tf.Source = blob.Path, "releases"
		// The cache keeps blobs without the execute bit: check a copy.
		if err := b.checkReleaseVersion(ctx, blob, src.Version); err != nil {
			return fmt.Errorf("%s: terraform %s from releases: %w", src.Origin, src.Version, err)
		}
	}
	plat := slashPlatform(host)
	sum, err := b.stageFile(bin, bundle.TerraformPath(plat), 0o755)
	if err != nil {
		return fmt.Errorf("%s: %w", src.Origin, err)
	}
	tf.Binaries = []bundle.Binary{{Platform: plat, Path: bundle.TerraformPath(plat), Version: src.Version, SHA256: sum}}
	b.mu.Lock()
	b.comp.Terraform = tf
	b.mu.Unlock()
	b.progress.logf("terraform %s %s (%s)", src.Version, plat, tf.Source)
	return nil
}

// warnHostOnly says which platforms a host-only component leaves out.
func (b *builder) warnHostOnly(o Origin, what string) {
	var others []string
	for _, p := range b.cfg.Platforms {
		if p != hostPlatform() {
			others = append(others, slashPlatform(p))
		}
	}
	if len(others) > 0 {
		b.progress.logf("%s: %s is bundled for %s only (this host's platform); an appliance on %s would have none", o, what, slashPlatform(hostPlatform()), strings.Join(others, ", "))
	}
}

// terraformRelease downloads terraform with hc-install into the cache,
// unless an earlier build did.
func (b *builder) terraformRelease(ctx context.Context, src *TerraformSource, p mirror.Platform) (cachedBlob, error) {
	base := "https://" + releasesHost + "/"
	if u, ok := b.cfg.Registries[releasesHost]; ok {
		base = u
	}
	key := base + " terraform " + src.Version + " " + p.String()
	if blob, ok := b.cache.lookup("terraform", key); ok && verifyCached(blob) == nil {
		b.hits.Add(1)
		blob.Checked = true
		return blob, nil
	}
	v, err := version.NewVersion(src.Version)
	if err != nil {
		return cachedBlob{}, err
	}
	if err := b.sem.Acquire(ctx, 1); err != nil {
		return cachedBlob{}, err
	}
	defer b.sem.Release(1)
	work, err := b.cache.tempDir()
	if err != nil {
		return cachedBlob{}, err
	}
	defer os.RemoveAll(work)
	ev := &releases.ExactVersion{
		Product:    product.Terraform,
		Version:    v,
		InstallDir: work,
		Timeout:    30 * time.Minute,
		HTTPClient: b.client,
	}
	if base != "https://"+releasesHost+"/" {
		ev.ApiBaseURL = strings.TrimSuffix(base, "/")
	}
	ev.ArmoredPublicKey = b.opts.releasesKey
	path, err := ev.Install(ctx)
	if err != nil {
		return cachedBlob{}, err
	}
	blob, err := b.cache.importFile(filepath.Clean(path))
	if err != nil {
		return cachedBlob{}, err
	}
	return blob, b.cache.remember("terraform", key, blob)
}

// checkReleaseVersion runs a downloaded terraform's `terraform version` (as
// provisionerd checks it) to be sure the release is the version asked for.
func (b *builder) checkReleaseVersion(ctx context.Context, blob cachedBlob, want string) error {
	work, err := b.cache.tempDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	exe := filepath.Join(work, "terraform")
	if err := copyFileAtomic(blob.Path, exe, 0o755); err != nil {
		return err
	}
	_, err = terraform.Find(ctx, terraform.Options{Path: exe, Version: want})
	return err
}
