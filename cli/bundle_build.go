package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/bundle"
	"airgapcoder/bundle/builder"
	"airgapcoder/internal/bytesize"
)

func init() { bundleSubcommands = append(bundleSubcommands, (*invocation).bundleBuildCmd) }

// bundleBuildOptions map build's flags to the environment.
var bundleBuildOptions = options{
	{flag: "output", env: "CODER_BUNDLE_OUTPUT"},
	{flag: "sign-key", env: "CODER_BUNDLE_SIGN_KEY"},
	{flag: "split", env: "CODER_BUNDLE_SPLIT"},
	{flag: "cache-dir", env: "CODER_BUNDLE_CACHE_DIR"},
	{flag: "parallel", env: "CODER_BUNDLE_PARALLEL"},
	{flag: "against", env: "CODER_BUNDLE_AGAINST"},
}

// bundleBuildConfig is `coder bundle build`'s configuration.
type bundleBuildConfig struct {
	file     string
	output   string
	signKey  string
	split    string
	cacheDir string
	parallel int
	against  string
}

func (inv *invocation) bundleBuildCmd() *cobra.Command {
	var cfg bundleBuildConfig
	cmd := &cobra.Command{
		Use:   "build [-f bundle.yaml] [--output DIR] [--sign-key KEY] [--split SIZE] [--cache-dir DIR] [--against INVENTORY]",
		Short: "Fetch, verify and pack everything bundle.yaml lists into one signed bundle",
		Long: `Read bundle.yaml (see docs/bundle-build.md), fetch every source it lists through
one HTTP client (HTTPS_PROXY/NO_PROXY, the system roots plus the certs: files and
SSL_CERT_FILE, the registries: overrides), verify it (provider SHA256SUMS and
their GPG signatures, image digests, PostgreSQL checksums, the terraform
version), check the templates against the bundled providers and images, and
write <name>-<release>.bundle (or its parts with --split) into --output.

Downloads are cached by content in --cache-dir: a second build fetches only
what changed, and an interrupted one resumes. The same inputs and key give the
same bytes; set SOURCE_DATE_EPOCH to fix the build time.

With --against INVENTORY (written on the offline side by coder appliance
inventory), write a delta bundle, <name>-<release>-from-<base>.bundle: the full
signed manifest, and only the files the site's installed release lacks.
coder appliance upgrade (or install) assembles the release from both.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bundleBuildOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			return inv.bundleBuild(cmd, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&cfg.file, "file", "f", "bundle.yaml", "The bundle definition")
	f.StringVar(&cfg.output, "output", ".", "Folder to write the bundle into (CODER_BUNDLE_OUTPUT)")
	f.StringVar(&cfg.signKey, "sign-key", "", "ed25519 private key (coder bundle keygen) to sign with; without it the bundle is unsigned (CODER_BUNDLE_SIGN_KEY)")
	f.StringVar(&cfg.split, "split", "", "Cut the bundle into parts of this size, such as 4GiB-1 or 700MB (CODER_BUNDLE_SPLIT)")
	f.StringVar(&cfg.cacheDir, "cache-dir", "", "Download cache (CODER_BUNDLE_CACHE_DIR); default: the user cache folder + /coder/bundle")
	f.IntVar(&cfg.parallel, "parallel", 4, "Downloads at a time (CODER_BUNDLE_PARALLEL)")
	f.StringVar(&cfg.against, "against", "", "Write a delta bundle against the release this inventory (coder appliance inventory) describes (CODER_BUNDLE_AGAINST)")
	return cmd
}

func (inv *invocation) bundleBuild(cmd *cobra.Command, cfg bundleBuildConfig) error {
	if cfg.parallel < 1 {
		return usageErrorf("--parallel %d: want at least 1", cfg.parallel)
	}
	var split int64
	if cfg.split != "" {
		n, err := bundle.ParseSize(cfg.split)
		if err != nil {
			return usageErrorf("--split %s: %v", cfg.split, strings.TrimPrefix(err.Error(), "bundle: "))
		}
		split = n
	}
	conf, err := builder.LoadConfig(cfg.file)
	var cerr *builder.ConfigError
	switch {
	case errors.As(err, &cerr):
		return usageErrorf("%v", err)
	case errors.Is(err, os.ErrNotExist):
		return usageErrorf("-f %s: no such file (write a bundle.yaml, see docs/bundle-build.md)", cfg.file)
	case err != nil:
		return err
	}
	opts := builder.Options{
		Config:    conf,
		OutputDir: cfg.output,
		Split:     split,
		CacheDir:  cfg.cacheDir,
		Parallel:  cfg.parallel,
		Log:       inv.stderr,
		TTY:       writerIsTerminal(inv.stderr),
		Environ:   inv.environ,
	}
	if cfg.against != "" {
		inv, err := bundle.ReadInventory(cfg.against)
		if err != nil {
			return usageErrorf("--against %s: %v", cfg.against, err)
		}
		if inv.Name != conf.Name {
			return usageErrorf("--against %s: the site runs bundle %q, bundle.yaml builds %q: a delta only applies to the same bundle", cfg.against, inv.Name, conf.Name)
		}
		if inv.Release == conf.Release {
			return usageErrorf("--against %s: the site already runs release %s; change release: in bundle.yaml", cfg.against, conf.Release)
		}
		opts.Against = &inv.Manifest
	}
	if cfg.signKey != "" {
		key, err := bundle.LoadPrivateKey(cfg.signKey)
		if err != nil {
			return err // a *bundle.KeyError: a usage error, see Main
		}
		opts.Key = key
	} else {
		fmt.Fprintln(inv.stderr, "warning: no --sign-key: the bundle will be unsigned, and installing it will need --allow-unsigned")
	}
	res, err := builder.Build(cmd.Context(), opts)
	if err != nil {
		return inv.explainMissing(err)
	}
	fmt.Fprintf(inv.stdout, "%s\n", res.Path)
	for _, p := range res.Parts {
		fmt.Fprintf(inv.stdout, "  %s\n", p)
	}
	fmt.Fprintf(inv.stdout, "sha256 %s  (%s, %d files; %s downloaded, %d from the cache)\n",
		res.SHA256, bytesize.Format(res.Size), len(res.Manifest.Files), bytesize.Format(res.Downloaded), res.CacheHits)
	if d := res.Delta; d != nil {
		fmt.Fprintf(inv.stdout, "delta against %s %s: carries %d of %d files, %s of %s\n",
			d.Base.Name, d.Base.Release, len(res.Manifest.Files)-len(d.Omitted), len(res.Manifest.Files), bytesize.Format(d.CarriedSize), bytesize.Format(d.PayloadSize))
	}
	return nil
}
