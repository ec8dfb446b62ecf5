package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/agent"
	"airgapcoder/codersdk"

	"airgapcoder/internal/atomicfile"
)

// The block coder config-ssh owns in ~/.ssh/config, between these markers
// (Coder's own, so that a config written by Coder's CLI is taken over).
const (
	sshConfigStart = "# ------------START-CODER-----------"
	sshConfigEnd   = "# ------------END-CODER------------"
)

// sshConfigBlock renders the Host entries for workspaces; ciphers, when
// not empty, is their Ciphers line (see sshClientCiphers).
func sshConfigBlock(coderPath, globalConfig string, workspaces, ciphers []string) string {
	return sshConfigBlockVia(coderPath, globalConfig, "", workspaces, ciphers)
}

// sshConfigBlockVia is sshConfigBlock whose ProxyCommand connects through
// the region proxy names (--proxy; "" leaves the choice to coder ssh).
func sshConfigBlockVia(coderPath, globalConfig, proxy string, workspaces, ciphers []string) string {
	// OpenSSH runs ProxyCommand with the user's shell and expands %
	// tokens first.
	esc := func(s string) string { return strings.ReplaceAll(shellQuote(s), "%", "%%") }
	region := ""
	if proxy != "" {
		region = " --proxy " + esc(proxy)
	}
	var b strings.Builder
	fmt.Fprintln(&b, sshConfigStart)
	fmt.Fprintln(&b, "# This section is managed by coder. Do not edit: run `coder config-ssh` to update it.")
	for _, w := range workspaces {
		fmt.Fprintf(&b, "\nHost %s%s\n", sshHostPrefix, w)
		fmt.Fprintf(&b, "\tProxyCommand %s --global-config %s ssh%s --stdio %%h\n", esc(coderPath), esc(globalConfig), region)
		fmt.Fprintln(&b, "\tConnectTimeout 0")
		fmt.Fprintln(&b, "\tStrictHostKeyChecking no")
		fmt.Fprintln(&b, "\tUserKnownHostsFile /dev/null")
		fmt.Fprintln(&b, "\tLogLevel ERROR")
		if len(ciphers) > 0 {
			fmt.Fprintf(&b, "\tCiphers %s\n", strings.Join(ciphers, ","))
		}
	}
	fmt.Fprintln(&b, sshConfigEnd)
	return b.String()
}

// sshClientCiphers returns the ciphers to ask OpenSSH for: those of the
// agent's (agent.SSHCiphers, AES-GCM first) that the ssh on PATH knows, as
// `ssh -Q cipher` lists them. OpenSSH asks for chacha20-poly1305 first,
// which the agent does not offer, and then AES-CTR; AES-GCM is faster. An
// ssh built without OpenSSL has no AES-GCM and would refuse a Ciphers line
// naming it, hence the question. Nil when ssh cannot say (not installed,
// older than 6.3): OpenSSH's own order applies then.
func sshClientCiphers(ctx context.Context) []string {
	out, err := exec.CommandContext(ctx, "ssh", "-Q", "cipher").Output()
	if err != nil {
		return nil
	}
	return agentCiphersAmong(strings.Fields(string(out)))
}

// agentCiphersAmong returns the agent's ciphers that supported holds, in
// the agent's order.
func agentCiphersAmong(supported []string) []string {
	var ciphers []string
	for _, c := range agent.SSHCiphers {
		if slices.Contains(supported, c) {
			ciphers = append(ciphers, c)
		}
	}
	return ciphers
}

// replaceSSHBlock puts block in place of the marked block of config, or
// appends it.
func replaceSSHBlock(config, block string) (string, error) {
	start := strings.Index(config, sshConfigStart)
	end := strings.Index(config, sshConfigEnd)
	switch {
	case start < 0 && end < 0:
		if config != "" && !strings.HasSuffix(config, "\n") {
			config += "\n"
		}
		if config != "" {
			config += "\n"
		}
		return config + block, nil
	case start < 0 || end < start:
		return "", errors.New("the coder section's markers are broken (one is missing or they are out of order): fix them by hand")
	}
	end += len(sshConfigEnd)
	if end < len(config) && config[end] == '\n' {
		end++
	}
	return config[:start] + block + config[end:], nil
}

func (inv *invocation) configSSHCmd() *cobra.Command {
	var (
		yes   bool
		path  string
		proxy string
	)
	cmd := &cobra.Command{
		Use:   "config-ssh",
		Short: "Add an SSH Host entry for each of your workspaces to ~/.ssh/config",
		Long: `Write a "Host coder.<workspace>" entry for each of your workspaces into a marked
section of ~/.ssh/config, so that plain OpenSSH (ssh, scp, sftp, editors' remote
plugins) reaches them through coderd: ssh coder.<workspace>. Running it again
rewrites only that section. With --proxy NAME (or CODER_WORKSPACE_PROXY) the
entries connect through that region (coder ssh --proxy NAME); without it, coder ssh
picks the region with the lowest latency each time (remembered for 5m).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := regionOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			client, err := inv.client()
			if err != nil {
				return err
			}
			if proxy, err = inv.configSSHProxy(cmd, client, proxy); err != nil {
				return err
			}
			resp, err := client.Workspaces(cmd.Context(), codersdk.WorkspaceFilter{Owner: codersdk.Me})
			if err != nil {
				return err
			}
			names := make([]string, 0, len(resp.Workspaces))
			for _, w := range resp.Workspaces {
				names = append(names, w.Name)
			}
			sort.Strings(names)
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("locate the coder binary: %w", err)
			}
			globalConfig, err := filepath.Abs(inv.globalConfig)
			if err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(globalConfig, sessionFile)); err != nil {
				fmt.Fprintf(inv.stderr, "Warning: no session is stored in %s; the entries' ProxyCommand uses it: run `coder login` first.\n", globalConfig)
			}
			if path == "" {
				home, err := os.UserHomeDir()
				if err != nil {
					return fmt.Errorf("find ~/.ssh/config: %w (pass --ssh-config-file)", err)
				}
				path = filepath.Join(home, ".ssh", "config")
			}
			// Write through a symlink (dotfile managers) to its target.
			if target, err := filepath.EvalSymlinks(path); err == nil {
				path = target
			}
			old, err := os.ReadFile(path)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			next, err := replaceSSHBlock(string(old), sshConfigBlockVia(self, globalConfig, proxy, names, sshClientCiphers(cmd.Context())))
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if next == string(old) {
				fmt.Fprintf(inv.stderr, "%s is up to date (%d workspaces).\n", path, len(names))
				return nil
			}
			if !yes {
				fmt.Fprintf(inv.stderr, "This writes Host entries for %d workspaces (%s) into %s.\nContinue? [y/N] ",
					len(names), strings.Join(prefixed(names), ", "), path)
				line, _ := bufio.NewReader(inv.stdin).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
					return errors.New("not changed: answer y, or pass -y")
				}
			}
			mode := fs.FileMode(0o600)
			if st, err := os.Stat(path); err == nil {
				mode = st.Mode().Perm()
			} else if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return err
			}
			if err := atomicfile.Write(path, []byte(next), mode); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
			fmt.Fprintf(inv.stderr, "Updated %s: %d workspaces.\n", path, len(names))
			if len(names) > 0 {
				fmt.Fprintf(inv.stderr, "Try: ssh %s%s\n", sshHostPrefix, names[0])
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Skip the confirmation prompt")
	cmd.Flags().StringVar(&path, "ssh-config-file", "", "SSH config file to write (default ~/.ssh/config)")
	proxyFlag(cmd, &proxy)
	return cmd
}

// configSSHProxy checks --proxy for config-ssh and returns what the
// entries pass to coder ssh: "" for auto (coder ssh's default), else the
// region's name. A name that is no proxy is a usage error; a proxy that
// is not healthy now is written with a warning (coder ssh uses the
// primary until it is).
func (inv *invocation) configSSHProxy(cmd *cobra.Command, client *codersdk.Client, proxy string) (string, error) {
	switch {
	case proxy == "" || strings.EqualFold(proxy, regionAuto):
		return "", nil
	case strings.EqualFold(proxy, regionPrimary):
		return regionPrimary, nil
	}
	reg, why, err := inv.regionChooser(cmd, client).lookupProxy(cmd.Context(), proxy)
	if err != nil {
		return "", err
	}
	if why != "" {
		fmt.Fprintf(inv.stderr, "Warning: workspace proxy %q %s; the entries use it once it is healthy, and the primary until then.\n", proxy, why)
	}
	if reg.Name != "" {
		return reg.Name, nil
	}
	return proxy, nil
}

func prefixed(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = sshHostPrefix + n
	}
	return out
}
