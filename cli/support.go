package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/internal/atomicfile"
	"airgapcoder/internal/supportbundle"
)

func (inv *invocation) supportCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "support", Short: "Diagnostics to carry out of the gap"}
	cmd.AddCommand(inv.supportBundleCmd())
	return cmd
}

// supportBundleCmd writes what the deployment says about itself into one
// zip (as Coder's `coder support bundle`).
func (inv *invocation) supportBundleCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "bundle [WORKSPACE] [--output-file FILE]",
		Short: "Write a zip of diagnostics (health, logs, settings, PostgreSQL, audit records), without secrets",
		Long: `Write what the deployment says about itself through the API, with your session,
into one zip archive to carry out of the gap: versions, each component's health,
the answering replica's recent logs (every component's, redacted), its process
and host memory, PostgreSQL's version, settings and table sizes, the appliance's
status, release manifest, settings (secrets redacted), certificates (no keys)
and disk, the certificate chain the deployment served, replicas, the newest
audit records and, with WORKSPACE (NAME or OWNER/NAME), its latest build's log
and its agents' logs. All but the versions, the chain and the workspace need
an owner. It holds no password, token, PSK or private key: the API returns
none, and every file is redacted once more on its way into the archive. What
could not be read is listed in errors.txt inside.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("at most one WORKSPACE")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := inv.client()
			if err != nil {
				return err
			}
			if output == "" {
				output = "coder-support-" + time.Now().UTC().Format("20060102-150405") + ".zip"
			}
			opts := supportbundle.Options{Client: client}
			if len(args) == 1 {
				opts.Workspace = args[0]
			}
			tmp, err := os.CreateTemp(filepath.Dir(output), ".support-*.zip")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			names, err := supportbundle.Write(cmd.Context(), tmp, opts)
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("write the support bundle: %w", err)
			}
			if err := os.Chmod(tmp.Name(), 0o600); err != nil {
				return err
			}
			if err := os.Rename(tmp.Name(), output); err != nil {
				return err
			}
			_ = atomicfile.SyncDir(filepath.Dir(output))
			fmt.Fprintf(inv.stderr, "Wrote %s (%d files).\n", output, len(names))
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output-file", "O", "", "Archive to write (default: coder-support-<time>.zip in this folder)")
	return cmd
}
