// Package cli wires the coder command line to the packages that do the work:
// it declares commands and flags (cobra), layers flags, CODER_* environment,
// the YAML config file and defaults (koanf), and prints results. Domain
// logic lives in coderd, codersdk and the other packages; this package only
// turns arguments into their calls and their answers into output.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"airgapcoder/bundle"
	"airgapcoder/codersdk"
	"airgapcoder/internal/buildinfo"
)

// usageError is a mistake in how a command was called: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// Main runs the CLI and returns the exit code: 0 on success, 1 on failure,
// 2 on usage errors (a key file that cannot be used is one: the flag that
// named it is wrong).
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	inv := &invocation{stdin: stdin, stdout: stdout, stderr: stderr, environ: os.Environ()}
	root := inv.root()
	if isGitAskpassRun(args, inv.environ) { // git runs us as its GIT_ASKPASS
		args = append([]string{"gitaskpass"}, args...)
	}
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ec *exitCodeError
	if errors.As(err, &ec) {
		return ec.code // a remote command's own exit code (coder ssh)
	}
	fmt.Fprintf(stderr, "error: %s\n", oneLine(certificateHint(err)))
	var ue *usageError
	var ke *bundle.KeyError // a key file named by --public-key or --sign-key
	if errors.As(err, &ue) || errors.As(err, &ke) {
		return 2
	}
	return 1
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// invocation carries one run's streams, environment and global flags.
type invocation struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	environ        []string

	globalConfig string
	url          string
	token        string
	caFile       string
	verbose      bool
}

func (inv *invocation) getenv(name string) string {
	for _, kv := range inv.environ {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// globalOptions map the root's persistent flags, and those of the commands
// that talk to a deployment (clientFlags), to the environment.
var globalOptions = options{
	{flag: "global-config", env: "CODER_CONFIG_DIR"},
	{flag: "url", env: "CODER_URL"},
	{flag: "token", env: "CODER_SESSION_TOKEN"},
	{flag: "ca-file", env: "CODER_CA_FILE"},
}

func defaultConfigDir() string {
	if dir, err := os.UserConfigDir(); err == nil {
		return filepath.Join(dir, "coderv2")
	}
	return filepath.Join(os.TempDir(), "coderv2")
}

func (inv *invocation) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "coder",
		Short:         "Self-hosted remote development workspaces, built for air-gapped networks",
		Version:       buildinfo.Version(),
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// Layer the global flags; each command layers its own in RunE.
			return globalOptions.resolvePersistent(cmd, inv.environ)
		},
	}
	root.SetIn(inv.stdin)
	root.SetOut(inv.stdout)
	root.SetErr(inv.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	pf := root.PersistentFlags()
	pf.StringVar(&inv.globalConfig, "global-config", defaultConfigDir(), "Directory for the CLI's session and the built-in PostgreSQL's data (CODER_CONFIG_DIR)")
	pf.BoolVarP(&inv.verbose, "verbose", "v", false, "Log debug output")

	// Commands that talk to a deployment take --url, --token and
	// --ca-file; the others (server, appliance, bundle, agent, …) do not
	// list flags they would ignore.
	client := inv.clientFlags
	root.AddCommand(
		inv.versionCmd(),
		inv.serverCmd(),
		inv.loginCmd(), // its own --token and --ca-file: the URL is its argument
		client(inv.logoutCmd()),
		client(inv.usersCmd()),
		client(inv.groupsCmd()),
		client(inv.tokensCmd()),
		client(inv.templatesCmd()),
		client(inv.createCmd()),
		client(inv.updateCmd()),
		client(inv.listCmd()),
		client(inv.showCmd()),
		client(inv.scheduleCmd()), // schedule.go
		client(inv.dormantCmd()),  // schedule_dormant.go
		client(inv.transitionCmd("start", codersdk.WorkspaceTransitionStart)),
		client(inv.transitionCmd("stop", codersdk.WorkspaceTransitionStop)),
		client(inv.transitionCmd("delete", codersdk.WorkspaceTransitionDelete)),
		client(inv.restartCmd()),
		client(inv.whoamiCmd()),
		client(inv.pingCmd()),
		client(inv.stateCmd()),
		client(inv.provisionerCmd()),
		client(inv.replicasCmd()),
		inv.wsproxyCmd(), // its client subcommands take --url, --token and --ca-file
		client(inv.supportCmd()),
		client(inv.provisionerdCmd()),
		inv.applianceCmd(),
		inv.mirrorCmd(),
		inv.certsCmd(),
		inv.bundleCmd(),
		inv.agentCmd(),
		inv.statCmd(),
		client(inv.sshCmd()),
		client(inv.portForwardCmd()),
		client(inv.configSSHCmd()),
		client(inv.auditCmd()),
		inv.externalAuthCmd(),
		inv.gitAskpassCmd(),
	)
	// Every command rejects stray arguments as a usage error.
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
		if !c.Runnable() && c.HasSubCommands() {
			// A command group: an unknown subcommand is a usage error.
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageErrorf("unknown command %q for %s (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
				}
				return cmd.Help()
			}
		}
		if c.Args == nil {
			c.Args = noArgs
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return root
}

// clientFlags gives cmd (and, for a group, its subcommands) the flags of a
// command that talks to a deployment: --url, --token and --ca-file.
func (inv *invocation) clientFlags(cmd *cobra.Command) *cobra.Command {
	pf := cmd.PersistentFlags()
	pf.StringVar(&inv.url, "url", "", "URL of the deployment (CODER_URL); default: what coder login stored")
	pf.StringVar(&inv.token, "token", "", "Session token (CODER_SESSION_TOKEN); default: what coder login stored")
	pf.StringVar(&inv.caFile, "ca-file", "", "PEM CA certificates trusted for the deployment besides the system's (CODER_CA_FILE); coder login stores them")
	return cmd
}

// resolvePersistent layers the persistent flags cmd has: the root's, and a
// client command's.
func (o options) resolvePersistent(cmd *cobra.Command, environ []string) error {
	fake := &cobra.Command{}
	fake.Flags().AddFlagSet(cmd.Root().PersistentFlags())
	fake.Flags().AddFlagSet(cmd.InheritedFlags())
	fake.Flags().AddFlagSet(cmd.PersistentFlags())
	return o.resolve(fake, "", environ)
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q (see --help)", cmd.CommandPath(), strings.Join(args, " "))
	}
	return nil
}

func exactArgs(n int, names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s needs %d argument(s): %s (see --help)", cmd.CommandPath(), n, strings.Join(names, " "))
		}
		return nil
	}
}

// minArgs wants at least n arguments; what says which ("at least one
// template NAME").
func minArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErrorf("%s needs %s (see --help)", cmd.CommandPath(), what)
		}
		return nil
	}
}

func (inv *invocation) logger() *slog.Logger {
	level := slog.LevelInfo
	if inv.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewJSONHandler(inv.stderr, &slog.HandlerOptions{Level: level}))
}

func (inv *invocation) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(inv.stdout, buildinfo.Version())
			return nil
		},
	}
}

// Session files under the global config dir, as Coder's CLI keeps them.
const (
	sessionFile = "session"
	urlFile     = "url"
)

// client returns a client for the deployment from --url/--token, else from
// what `coder login` stored, trusting the CAs of readCAFiles.
func (inv *invocation) client(extraCAFiles ...string) (*codersdk.Client, error) {
	rawURL, token := inv.url, inv.token
	if rawURL == "" {
		b, err := os.ReadFile(filepath.Join(inv.globalConfig, urlFile))
		if err != nil {
			return nil, errors.New("no deployment URL: run `coder login URL` first, or set --url / CODER_URL")
		}
		rawURL = strings.TrimSpace(string(b))
	}
	if token == "" {
		if b, err := os.ReadFile(filepath.Join(inv.globalConfig, sessionFile)); err == nil {
			token = strings.TrimSpace(string(b))
		}
	}
	u, err := parseDeploymentURL(rawURL)
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, fmt.Errorf("not logged in to %s: run `coder login %s`, or set --token / CODER_SESSION_TOKEN", u, u)
	}
	c, err := inv.newClient(u, extraCAFiles...)
	if err != nil {
		return nil, err
	}
	c.SessionToken = token
	return c, nil
}

func parseDeploymentURL(raw string) (*url.URL, error) {
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, usageErrorf("%q is not a deployment URL like https://coder.example.com", raw)
	}
	return u, nil
}
