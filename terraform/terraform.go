// Package terraform finds the terraform binary the product runs: exactly
// the pinned version, at a given path or on the PATH, or (on a connected
// host, when allowed) downloaded and GPG-verified by hc-install. It only
// locates and checks binaries; it must not run plans or applies (that is
// provisionerd's job) and never downloads unless told to.
package terraform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-version"
	install "github.com/hashicorp/hc-install"
	"github.com/hashicorp/hc-install/product"
	"github.com/hashicorp/hc-install/releases"
	"github.com/hashicorp/hc-install/src"
)

// DefaultVersion is the Terraform version the product pins.
const DefaultVersion = "1.11.4"

// Options say which terraform binary to use.
type Options struct {
	// Path is an explicit binary; empty means search the PATH.
	Path string
	// Version is the exact version required (default DefaultVersion).
	Version string
	// AllowDownload lets a connected host download the pinned version from
	// HashiCorp's releases (GPG-verified by hc-install) into InstallDir when
	// it is not found locally. Off by default: the appliance never downloads.
	AllowDownload bool
	InstallDir    string
	Logger        *slog.Logger
}

// Find returns the path of a terraform binary of exactly the pinned
// version. It fails at once, naming the path and the version expected, when
// the binary is missing or of another version and downloading is off.
func Find(ctx context.Context, opts Options) (string, error) {
	want := opts.Version
	if want == "" {
		want = DefaultVersion
	}
	v, err := version.NewVersion(want)
	if err != nil {
		return "", fmt.Errorf("terraform version %q: %w", want, err)
	}
	if opts.Path != "" {
		got, err := binaryVersion(ctx, opts.Path)
		if err != nil {
			return "", fmt.Errorf("terraform at %s: %w (want version %s; set --terraform-path to a terraform %s binary)", opts.Path, err, want, want)
		}
		if !got.Equal(v) {
			return "", fmt.Errorf("terraform at %s is version %s, want exactly %s: install terraform %s there or point --terraform-path at it", opts.Path, got, want, want)
		}
		return opts.Path, nil
	}
	found := "none on the PATH"
	if p, err := exec.LookPath("terraform"); err == nil {
		found = p
		got, err := binaryVersion(ctx, p)
		if err == nil && got.Equal(v) {
			return p, nil
		}
		if err == nil {
			found = fmt.Sprintf("%s, version %s", p, got)
		}
	}
	if !opts.AllowDownload {
		return "", fmt.Errorf("no terraform %s found (found %s; downloading is off): install terraform %s on the PATH or set --terraform-path", want, found, want)
	}
	if opts.InstallDir == "" {
		return "", errors.New("terraform download needs an install dir")
	}
	if err := os.MkdirAll(opts.InstallDir, 0o755); err != nil {
		return "", err
	}
	// hc-install verifies the download against HashiCorp's signed SHA256SUMS.
	path, err := install.NewInstaller().Ensure(ctx, []src.Source{
		&releases.ExactVersion{Product: product.Terraform, Version: v, InstallDir: opts.InstallDir},
	})
	if err != nil {
		return "", fmt.Errorf("no terraform %s found (found %s) and the download failed: %w", want, found, err)
	}
	return path, nil
}

func binaryVersion(ctx context.Context, path string) (*version.Version, error) {
	cmd := exec.CommandContext(ctx, path, "version")
	// CHECKPOINT_DISABLE: `terraform version` otherwise asks HashiCorp
	// whether a newer release exists — a connection off the machine.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "CHECKPOINT_DISABLE=1", "TF_CLI_CONFIG_FILE=" + os.DevNull}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("run %s version: %w", filepath.Base(path), err)
	}
	first := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
	if len(first) < 2 || first[0] != "Terraform" {
		return nil, fmt.Errorf("unexpected output of %s version: %q", path, strings.TrimSpace(string(out)))
	}
	return version.NewVersion(strings.TrimPrefix(first[1], "v"))
}
