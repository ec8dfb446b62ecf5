package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/certs"
	"airgapcoder/mirror"
)

var mirrorServeOptions = options{
	applianceDirOption,
	{flag: "address", env: "CODER_MIRROR_ADDRESS"},
	{flag: "hosts", env: "CODER_MIRROR_HOSTS"},
}

var mirrorPushOptions = options{
	applianceDirOption,
	{flag: "to", env: "CODER_MIRROR_PUSH_TO"},
	{flag: "concurrency", env: "CODER_MIRROR_PUSH_CONCURRENCY"},
	{flag: "stall-timeout", env: "CODER_MIRROR_PUSH_STALL_TIMEOUT"},
}

func (inv *invocation) mirrorCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mirror",
		Short: "Serve an installed bundle's providers and images, or push its images to a registry",
	}
	cmd.AddCommand(inv.mirrorServeCmd(), inv.mirrorPushCmd())
	return cmd
}

func (inv *invocation) mirrorServeCmd() *cobra.Command {
	var (
		dir, address string
		hosts        []string
	)
	cmd := &cobra.Command{
		Use:   "serve --dir DIR [--address ADDR]",
		Short: "Serve the provider mirror and a read-only OCI registry over HTTPS",
		Long: `Serve DIR/providers as a Terraform provider network mirror at
https://ADDR/terraform/providers/ and the images of DIR/images as a read-only OCI
registry at https://ADDR/v2/ (an image HOST/PATH:TAG is pulled as ADDR/HOST/PATH:TAG).
For an installed appliance, DIR/current/providers and DIR/current/images are served.
HTTPS uses DIR/certs/server.pem; when there is none, the appliance CA and a
certificate for the address's host, localhost and 127.0.0.1 are generated first
(see coder certs generate). Clients trust DIR/certs/ca.pem.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := mirrorServeOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			if err := requireDir(&dir); err != nil {
				return err
			}
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return usageErrorf("--address %q: want HOST:PORT, such as %s", address, mirror.DefaultAddress)
			}
			certHosts := append(serveHosts(host), hosts...)
			res, err := certs.EnsureServer(dir, certHosts, certs.Options{})
			if err != nil {
				if errors.Is(err, certs.ErrInvalidHost) {
					return usageErrorf("%v", err)
				}
				return err
			}
			inv.printGenerated(dir, res)
			cert, err := certs.LoadServerCertificate(dir)
			if err != nil {
				return err
			}
			content := bundleContent(dir)
			srv, err := mirror.NewServer(mirror.ServerOptions{
				Dir: dir, Certificate: cert, Address: address, Logger: inv.logger(),
				ProvidersDir: filepath.Join(content, mirror.ProvidersDir), ImagesDir: filepath.Join(content, mirror.ImagesDir),
				ModulesDir: filepath.Join(content, mirror.ModulesDir),
			})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			go func() {
				select {
				case <-srv.Ready():
				case <-ctx.Done():
					return
				}
				addr := srv.Addr().String()
				fmt.Fprintf(inv.stderr, "Mirror serving https://%s%s (providers) and https://%s%s (%d image repositories); clients trust %s.\n",
					addr, mirror.ProvidersPath, addr, mirror.RegistryPath, len(srv.Registry().Repositories()), caFileFor(dir))
			}()
			return srv.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "Installed bundle folder: providers/, images/ and certs/ (CODER_APPLIANCE_DIR)")
	f.StringVar(&address, "address", mirror.DefaultAddress, "HTTPS listen address (CODER_MIRROR_ADDRESS)")
	f.StringSliceVar(&hosts, "hosts", nil, "More DNS names or IP addresses for a generated server certificate (CODER_MIRROR_HOSTS)")
	return cmd
}

// bundleContent returns the folder that holds providers/, images/ and
// modules/ for the folder dir: dir itself (an extracted bundle), or
// dir/current, the release an installed appliance runs. Certificates stay
// in dir/certs either way.
func bundleContent(dir string) string {
	for _, sub := range []string{mirror.ProvidersDir, mirror.ImagesDir, mirror.ModulesDir} {
		if _, err := os.Stat(filepath.Join(dir, sub)); err == nil {
			return dir
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "current")); err == nil && st.IsDir() {
		return filepath.Join(dir, "current")
	}
	return dir
}

// serveHosts returns the names a generated certificate for a listener on
// host gets: the host itself (the machine's name for a wildcard address),
// localhost and the loopback addresses.
func serveHosts(host string) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if name, err := os.Hostname(); err == nil && name != "" {
			hosts = append(hosts, strings.ToLower(name))
		}
		return hosts
	}
	return append(hosts, host)
}

// caFileFor names what clients of the mirror should trust.
func caFileFor(dir string) string {
	ca := filepath.Join(certs.CertsDir(dir), certs.CAFile)
	if _, err := os.Stat(ca); err == nil {
		return ca
	}
	return "the CA that issued " + filepath.Join(certs.CertsDir(dir), certs.ServerFile)
}

func (inv *invocation) mirrorPushCmd() *cobra.Command {
	var (
		dir, to      string
		concurrency  int
		stallTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "push-images --dir DIR --to REGISTRY[/PREFIX]",
		Short: "Copy the bundle's images, all platforms, into a site registry",
		Long: `Copy every image of DIR/images (DIR/current/images for an installed appliance),
with all its platforms and unchanged digests, to REGISTRY[/PREFIX]/HOST/PATH:TAG.
Credentials come from the docker config (~/.docker/config.json, DOCKER_CONFIG); the
registry's certificate must chain to DIR/certs/trust.pem (coder certs import).
Blobs already in the registry are skipped, so an interrupted push continues when
run again. A transfer that moves no byte for --stall-timeout (the registry stopped
reading or answering) fails the push, naming the image, the blob and the registry.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := mirrorPushOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			if err := requireDir(&dir); err != nil {
				return err
			}
			if to == "" {
				return usageErrorf("--to is required: the registry (and path prefix) to push to, such as registry.corp:5000/coder")
			}
			if _, err := mirror.ParsePushTarget(to); err != nil {
				return usageErrorf("--to: %v", err)
			}
			if concurrency < 1 {
				return usageErrorf("--concurrency must be at least 1, got %d", concurrency)
			}
			if stallTimeout <= 0 {
				return usageErrorf("--stall-timeout must be positive, got %s", stallTimeout)
			}
			store, err := certs.Load(dir)
			if err != nil {
				return err
			}
			pushed, err := mirror.PushImages(cmd.Context(), mirror.PushOptions{
				Dir: dir, ImagesDir: filepath.Join(bundleContent(dir), mirror.ImagesDir),
				To: to, Concurrency: concurrency, Transport: store.Transport(), Progress: inv.stderr,
				StallTimeout: stallTimeout,
			})
			for _, p := range pushed {
				fmt.Fprintf(inv.stdout, "%s@%s\n", p.Target, p.Digest)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "Installed bundle folder: images/ and certs/ (CODER_APPLIANCE_DIR)")
	f.StringVar(&to, "to", "", "Registry and optional path prefix, REGISTRY[/PREFIX] (CODER_MIRROR_PUSH_TO)")
	f.IntVar(&concurrency, "concurrency", 4, "Blobs uploaded at once (CODER_MIRROR_PUSH_CONCURRENCY)")
	f.DurationVar(&stallTimeout, "stall-timeout", mirror.DefaultStallTimeout, "Fail a transfer that moves no byte for this long; run again to resume (CODER_MIRROR_PUSH_STALL_TIMEOUT)")
	return cmd
}
