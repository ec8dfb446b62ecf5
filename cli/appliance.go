package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"airgapcoder/appliance"
	"airgapcoder/internal/atomicfile"
	"airgapcoder/internal/bytesize"
)

func (inv *invocation) applianceCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "appliance", Short: "Install and run the offline appliance from a bundle"}
	cmd.AddCommand(inv.applianceInstallCmd(), inv.applianceUpCmd(), inv.applianceStatusCmd(), inv.applianceUpgradeCmd(),
		inv.applianceBackupCmd(), inv.applianceRestoreCmd(), inv.applianceInventoryCmd(),
		inv.applianceLauncherCmd(), inv.applianceLaunchCmd(), inv.applianceResetPasswordCmd())
	return cmd
}

func (inv *invocation) applianceInventoryCmd() *cobra.Command {
	var dir, output string
	cmd := &cobra.Command{
		Use:   "inventory --dir DIR [-o FILE]",
		Short: "Describe the installed release, for a delta bundle built against it",
		Long: `Write what the current release holds (its manifest: the digest of every file,
image blobs and provider archives included) as JSON, to FILE or standard output.
It holds no secret and no site data. Carry it to the connected side and run
coder bundle build --against FILE there: the delta bundle carries only what
this appliance lacks.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usageErrorf("--dir is required")
			}
			got, err := appliance.Inventory(dir)
			if err != nil {
				return err
			}
			b, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				return err
			}
			b = append(b, '\n')
			if output == "" || output == "-" {
				_, err = inv.stdout.Write(b)
				return err
			}
			if err := atomicfile.Write(output, b, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(inv.stderr, "wrote the inventory of %s %s to %s\n", got.Name, got.Release, output)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "Appliance folder")
	cmd.Flags().StringVarP(&output, "output", "o", "", "File to write (default: standard output)")
	return cmd
}

func (inv *invocation) applianceInstallCmd() *cobra.Command {
	var f installFlags
	cmd := &cobra.Command{
		Use:   "install BUNDLE",
		Short: "Verify a bundle and install it as the current release of DIR",
		Long: `Verify the bundle's signature and every file's hash while unpacking it into
DIR/releases/<release>, then switch DIR/current to it. Nothing outside a staging
folder is written until everything has been checked; a bad bundle leaves DIR as
it was. BUNDLE is the .bundle file or, for a split bundle, its .part000.`,
		Args: exactArgs(1, "BUNDLE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := f.key()
			if err != nil {
				return err
			}
			opts := appliance.InstallOptions{Bundle: args[0], Dir: f.dir, PublicKey: key, AllowUnsigned: f.allowUnsigned, Logger: inv.logger()}
			res, err := appliance.Install(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if res.AlreadyInstalled {
				fmt.Fprintf(inv.stdout, "Release %s was already installed in %s; it is current.\n", res.Release, f.dir)
			} else {
				fmt.Fprintf(inv.stdout, "Installed release %s of %s in %s.\n", res.Release, res.Manifest.Name, f.dir)
			}
			fmt.Fprintf(inv.stdout, "Start it with: coder appliance up --dir %s\n", f.dir)
			return nil
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func (inv *invocation) applianceUpCmd() *cobra.Command {
	var dir, httpAddress, tlsAddress, accessURL string
	var proxy bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the installed appliance: PostgreSQL, certificates, mirror, coderd and provisioners",
		Long: `Run the installed appliance until SIGTERM or Ctrl-C: PostgreSQL, certificates, mirror,
coderd and provisioners, configured by DIR/appliance.yaml.

With role: proxy in appliance.yaml, or --proxy, it runs a workspace proxy of a primary's
deployment instead, and nothing else (no PostgreSQL, mirror, coderd or provisioners): it
serves HTTPS on tls-address with the appliance CA's certificate for hosts, and registers
with primary-access-url using proxy-session-token-file, trusting trust.pem and
primary-ca-file (docs/wsproxy.md).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := (options{logFormatOption}).resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			if dir == "" {
				return usageErrorf("--dir is required")
			}
			overrides := map[string]any{}
			if cmd.Flags().Changed("http-address") {
				overrides["http-address"] = httpAddress
			}
			if cmd.Flags().Changed("tls-address") {
				overrides["tls-address"] = tlsAddress
			}
			if cmd.Flags().Changed("access-url") {
				overrides["access-url"] = accessURL
			}
			if proxy {
				overrides["role"] = appliance.RoleProxy
			}
			log, recent := inv.loggerWithRecentLogs(cmd)
			opts := appliance.UpOptions{Dir: dir, Overrides: overrides, Logger: log, RecentLogs: recent}
			if os.Geteuid() == 0 {
				// Root keeps only the workspace launcher; the appliance
				// runs as the service user, with the same flags.
				abs, err := filepath.Abs(dir)
				if err != nil {
					return err
				}
				args := []string{"appliance", "up", "--dir", abs}
				cmd.Flags().Visit(func(f *pflag.Flag) {
					if f.Name != "dir" {
						args = append(args, "--"+f.Name+"="+f.Value.String())
					}
				})
				return appliance.UpAsRoot(cmd.Context(), opts, args)
			}
			return appliance.Up(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "Appliance folder")
	cmd.Flags().StringVar(&tlsAddress, "tls-address", "", "HTTPS address of the dashboard, API and agent connections (default from appliance.yaml)")
	cmd.Flags().StringVar(&httpAddress, "http-address", "", "Plain HTTP address that only redirects to the access URL (default from appliance.yaml)")
	cmd.Flags().StringVar(&accessURL, "access-url", "", "URL users and workspaces reach the appliance at")
	cmd.Flags().BoolVar(&proxy, "proxy", false, "Run as a workspace proxy (role: proxy), whatever appliance.yaml's role says")
	logFormatFlag(cmd)
	return cmd
}

func (inv *invocation) applianceStatusCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{Use: "status", Short: "Show the installed releases and each component's health"}
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if dir == "" {
			return usageErrorf("--dir is required")
		}
		st, err := appliance.GetStatus(cmd.Context(), dir)
		if err != nil {
			return err
		}
		return render(inv.stdout, *out, st, []string{"COMPONENT", "STATE", "DETAIL"}, func() [][]string {
			rows := [][]string{
				{"role", st.Role, ""},
				{"bundle", st.Bundle + " " + st.Release, "previous: " + orDash(st.Previous)},
				{"providers", strconv.Itoa(st.Providers), ""},
				{"images", strconv.Itoa(st.Images), ""},
				{"templates", strconv.Itoa(st.Templates), ""},
				{"disk", bytesize.Format(st.DiskUsed) + " used", bytesize.Format(st.DiskFree) + " free"},
			}
			if o := st.OpenFiles; o != nil && o.Error != "" {
				rows = append(rows, []string{"open files", "unknown", o.Error})
			} else if o != nil {
				limit := func(n uint64) string {
					if n == ^uint64(0) { // unlimited
						return "unlimited"
					}
					return strconv.FormatUint(n, 10)
				}
				rows = append(rows, []string{"open files", limit(o.Soft) + " (hard " + limit(o.Hard) + ")", fmt.Sprintf("room for about %d agents (coderd, pid %d)", o.AgentsAtMost, o.PID)})
				if o.Warning != "" {
					rows = append(rows, []string{"", "WARNING", o.Warning})
				}
			}
			for _, c := range st.Components {
				rows = append(rows, []string{c.Name, c.State, c.Detail})
			}
			return rows
		})
	}
	cmd.Flags().StringVar(&dir, "dir", "", "Appliance folder")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (inv *invocation) applianceUpgradeCmd() *cobra.Command {
	var f installFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "upgrade BUNDLE",
		Short: "Install a new release, switch to it, and roll back when it does not come up healthy",
		Long: `Stop the appliance first. upgrade installs the bundle beside the current
release, copies the database aside, switches to the new release and starts it
until /healthz answers (running its migrations). When it does not come up, the
database copy and the previous release are put back and started to check they
serve. Start the appliance again afterwards.`,
		Args: exactArgs(1, "BUNDLE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := f.key()
			if err != nil {
				return err
			}
			opts := appliance.UpgradeOptions{Bundle: args[0], Dir: f.dir, PublicKey: key, AllowUnsigned: f.allowUnsigned, Force: force, Logger: inv.logger()}
			res, err := appliance.Upgrade(cmd.Context(), opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Upgraded %s from %s to %s. Start it with: coder appliance up --dir %s\n", f.dir, res.From, res.To, f.dir)
			return nil
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&force, "force", false, "Allow a downgrade")
	return cmd
}

func (inv *invocation) applianceBackupCmd() *cobra.Command {
	return inv.databaseFileCmd("backup FILE", "Dump the appliance's database with the bundle's pg_dump (works while it runs)",
		"Backed up the database of %s to %s.\n", appliance.Backup)
}

func (inv *invocation) applianceRestoreCmd() *cobra.Command {
	return inv.databaseFileCmd("restore FILE", "Replace the appliance's database with a backup (stop the appliance first)",
		"Restored the database of %s from %s.\n", appliance.Restore)
}

// databaseFileCmd is backup or restore: one FILE argument and --dir.
func (inv *invocation) databaseFileCmd(use, short, done string, run func(ctx context.Context, dir, file string, log *slog.Logger) error) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1, "FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return usageErrorf("--dir is required")
			}
			if err := run(cmd.Context(), dir, args[0], inv.logger()); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, done, dir, args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "Appliance folder")
	return cmd
}

// installFlags are the flags install and upgrade share: the appliance
// folder and the key the bundle must be signed with.
type installFlags struct {
	dir, pubKey   string
	allowUnsigned bool
}

func (f *installFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.dir, "dir", "", "Appliance folder")
	fs.StringVar(&f.pubKey, "public-key", "", "Public key (bundle.pub) that must have signed the bundle")
	fs.BoolVar(&f.allowUnsigned, "allow-unsigned", false, "Accept a bundle without a signature")
}

// key checks that --dir is set and returns the bundle key (see bundleKey).
func (f *installFlags) key() (ed25519.PublicKey, error) {
	if f.dir == "" {
		return nil, usageErrorf("--dir is required")
	}
	return bundleKey(f.pubKey, f.allowUnsigned)
}

// bundleKey loads --public-key, or accepts --allow-unsigned; one is required.
func bundleKey(pubKey string, allowUnsigned bool) (ed25519.PublicKey, error) {
	if pubKey == "" && !allowUnsigned {
		return nil, usageErrorf("pass --public-key KEY to check the bundle's signature, or --allow-unsigned")
	}
	return optionalPublicKey(pubKey)
}
