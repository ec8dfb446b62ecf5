package cli

import (
	"crypto/x509"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/certs"
)

// applianceDirOption is the --dir flag of the commands that work on an
// installed appliance folder.
var applianceDirOption = option{flag: "dir", env: "CODER_APPLIANCE_DIR"}

var certsOptions = options{
	applianceDirOption,
	{flag: "hosts", env: "CODER_CERTS_HOSTS"},
	{flag: "system-bundle", env: "CODER_CERTS_SYSTEM_BUNDLE"},
}

// certsConfig is what the certs subcommands are given.
type certsConfig struct {
	dir          string
	hosts        []string
	systemBundle string
}

func (c *certsConfig) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.dir, "dir", "", "Appliance folder; certificates live in DIR/certs (CODER_APPLIANCE_DIR)")
	f.StringVar(&c.systemBundle, "system-bundle", "", "PEM bundle of system roots copied into trust.pem (default: the OS bundle, such as "+certs.SystemBundles[0]+")")
}

// resolve layers the options and checks --dir.
func (c *certsConfig) resolve(cmd *cobra.Command, environ []string) error {
	if err := certsOptions.resolve(cmd, "", environ); err != nil {
		return err
	}
	return requireDir(&c.dir)
}

func (c *certsConfig) options() certs.Options {
	return certs.Options{SystemBundle: c.systemBundle}
}

// requireDir checks that --dir was given and makes it absolute.
func requireDir(dir *string) error {
	if *dir == "" {
		return usageErrorf("--dir (CODER_APPLIANCE_DIR) is required: the appliance folder")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	*dir = abs
	return nil
}

func (inv *invocation) certsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Manage the appliance's trust store and serving certificate",
		Long: `The appliance keeps its certificates in DIR/certs: trust.pem (system roots plus
imported CAs: what every client of the product trusts), the generated appliance CA
(ca.pem, ca-key.pem) and the serving certificate (server.pem, server-key.pem).`,
	}
	cmd.AddCommand(inv.certsImportCmd(), inv.certsGenerateCmd(), inv.certsRefreshCmd())
	return cmd
}

func (inv *invocation) certsImportCmd() *cobra.Command {
	var cfg certsConfig
	cmd := &cobra.Command{
		Use:   "import FILE... --dir DIR",
		Short: "Trust the CA certificates in FILEs (PEM files or bundles)",
		Long: `Add CA certificates to the trust store. Every certificate must be a CA inside its
validity period; a leaf certificate, an expired CA, a private key or anything else
refuses the whole import, and nothing changes. CAs already imported are skipped.`,
		Args: minArgs(1, "at least one FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cfg.resolve(cmd, inv.environ); err != nil {
				return err
			}
			res, err := certs.Import(cfg.dir, args, cfg.options())
			if err != nil {
				return err
			}
			for _, w := range res.Warnings {
				fmt.Fprintf(inv.stderr, "warning: %s\n", w)
			}
			for _, c := range res.Added {
				fmt.Fprintf(inv.stdout, "imported %s\n", describeCert(c))
			}
			for _, c := range res.Duplicates {
				fmt.Fprintf(inv.stdout, "already trusted %s\n", describeCert(c))
			}
			return inv.printTrust(cfg.dir)
		},
	}
	cfg.flags(cmd)
	return cmd
}

func (inv *invocation) certsGenerateCmd() *cobra.Command {
	var cfg certsConfig
	cmd := &cobra.Command{
		Use:   "generate --hosts h1,h2 --dir DIR",
		Short: "Create the appliance CA and a server certificate for the given hosts",
		Long: `Create the appliance CA (ECDSA P-256, 10 years; DIR/certs/ca.pem and ca-key.pem)
when there is none, and a server certificate signed by it (1 year; server.pem and
server-key.pem) for the DNS names and IP addresses in --hosts. The certificate is
renewed when it expires within 30 days, the host list changed or another CA issued
it (a site's certificate is replaced); otherwise nothing changes. The CA is added to
trust.pem.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.resolve(cmd, inv.environ); err != nil {
				return err
			}
			if len(cfg.hosts) == 0 {
				return usageErrorf("--hosts is required: the DNS names and IP addresses the server is reached at")
			}
			res, err := certs.Generate(cfg.dir, cfg.hosts, cfg.options())
			if err != nil {
				if errors.Is(err, certs.ErrInvalidHost) {
					return usageErrorf("--hosts: %v", err)
				}
				return err
			}
			inv.printGenerated(cfg.dir, res)
			return inv.printTrust(cfg.dir)
		},
	}
	cfg.flags(cmd)
	cmd.Flags().StringSliceVar(&cfg.hosts, "hosts", nil, "DNS names and IP addresses of the server certificate, comma separated (CODER_CERTS_HOSTS)")
	return cmd
}

func (inv *invocation) certsRefreshCmd() *cobra.Command {
	var cfg certsConfig
	cmd := &cobra.Command{
		Use:   "refresh --dir DIR",
		Short: "Rebuild trust.pem from the system roots, the appliance CA and the imported CAs",
		Long: `Rebuild DIR/certs/trust.pem, for example after the operating system's CA bundle
was updated, or to create it on an appliance that has no certificate of its own.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.resolve(cmd, inv.environ); err != nil {
				return err
			}
			if err := certs.Refresh(cfg.dir, cfg.options()); err != nil {
				return err
			}
			return inv.printTrust(cfg.dir)
		},
	}
	cfg.flags(cmd)
	return cmd
}

func (inv *invocation) printGenerated(dir string, res certs.GenerateResult) {
	cdir := certs.CertsDir(dir)
	if res.CACreated {
		fmt.Fprintf(inv.stdout, "created the appliance CA %s: %s\n", filepath.Join(cdir, certs.CAFile), describeCert(res.CA))
	}
	switch {
	case res.Issued:
		fmt.Fprintf(inv.stdout, "issued %s for %s, valid until %s (%s)\n", filepath.Join(cdir, certs.ServerFile),
			strings.Join(certNames(res.Server), ", "), res.Server.NotAfter.UTC().Format(time.DateOnly), res.Reason)
	case res.Server != nil:
		fmt.Fprintf(inv.stdout, "kept %s for %s, valid until %s\n", filepath.Join(cdir, certs.ServerFile),
			strings.Join(certNames(res.Server), ", "), res.Server.NotAfter.UTC().Format(time.DateOnly))
		if res.Reason != "" {
			fmt.Fprintf(inv.stderr, "warning: %s\n", res.Reason)
		}
	}
}

func (inv *invocation) printTrust(dir string) error {
	store, err := certs.Load(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(inv.stdout, "trust store %s: %d certificates\n", store.CertFile(), store.Len())
	return nil
}

func describeCert(c *x509.Certificate) string {
	if c == nil {
		return "(none)"
	}
	return fmt.Sprintf("%q (expires %s)", c.Subject.String(), c.NotAfter.UTC().Format(time.DateOnly))
}

func certNames(c *x509.Certificate) []string {
	names := append([]string{}, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	return names
}
