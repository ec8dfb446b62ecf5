package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"airgapcoder/appliance"
	"airgapcoder/appliance/launcher"
)

// applianceLauncherCmd is the root daemon that starts workspaces as their
// owners' accounts (coder-appliance-launcher.service).
func (inv *invocation) applianceLauncherCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "launcher --dir DIR",
		Short: "Serve the workspace launcher (as root): workspaces run as their owners' own accounts",
		Long: `Serve DIR/launcher/launcher.sock, through which the appliance (running as its
service user) starts each workspace of the process template as an account of
its owner's own (ws-<owner>, made on demand, no sudo), in
DIR/workspaces/<owner>/<workspace>. Only root runs it, and only the service
user may call it. coder appliance up started as root serves it itself; under
systemd it is coder-appliance-launcher.service.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := (options{logFormatOption}).resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			if dir == "" {
				return usageErrorf("--dir is required")
			}
			return appliance.ServeLauncher(cmd.Context(), dir, inv.loggerFor(cmd), nil)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "Appliance folder")
	logFormatFlag(cmd)
	return cmd
}

// applianceLaunchCmd is the launcher's client, which templates call
// through CODER_WORKSPACE_LAUNCHER.
func (inv *invocation) applianceLaunchCmd() *cobra.Command {
	var socket, owner, workspace string
	var envNames []string
	cmd := &cobra.Command{
		Use:   "launch start|stop --owner OWNER --workspace NAME [--env NAME]... [-- COMMAND...]",
		Short: "Start or stop a workspace process as its owner's account (what templates call)",
		Long: `Ask the workspace launcher to start COMMAND as the owner's own account, in a
session of its own, in DIR/workspaces/<owner>/<workspace> (its HOME), output
appended to .coder-agent.log there; or to stop it. Each --env NAME passes that
variable of this command's environment on (never on a command line, which
every user can read). Templates call it as "$CODER_WORKSPACE_LAUNCHER", which
the appliance's provisioners set:

  "$CODER_WORKSPACE_LAUNCHER" start --owner "$OWNER" --workspace "$WORKSPACE" \
      --env CODER_AGENT_TOKEN --env INIT_SCRIPT -- sh -c 'exec sh -c "$INIT_SCRIPT"'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || (args[0] != "start" && args[0] != "stop") {
				return usageErrorf("say start or stop")
			}
			if args[0] == "start" && len(args) < 2 {
				return usageErrorf("start needs a command after --")
			}
			if args[0] == "stop" && len(args) > 1 {
				return usageErrorf("stop takes no command")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if socket == "" || owner == "" || workspace == "" {
				return usageErrorf("--socket, --owner and --workspace are required")
			}
			req := launcher.Request{Op: args[0], Owner: owner, Workspace: workspace, Command: args[1:]}
			for _, name := range envNames {
				v, ok := os.LookupEnv(name)
				if !ok {
					return usageErrorf("--env %s: no such variable in the environment", name)
				}
				req.Env = append(req.Env, name+"="+v)
			}
			resp, err := launcher.Call(cmd.Context(), socket, req)
			if err != nil {
				return err
			}
			switch {
			case args[0] == "start":
				fmt.Fprintf(inv.stdout, "workspace %s/%s started as %s (uid %d, pid %d) in %s\n", owner, workspace, resp.User, resp.UID, resp.PID, resp.Home)
			case resp.PID != 0:
				fmt.Fprintf(inv.stdout, "workspace %s/%s stopped (pid %d)\n", owner, workspace, resp.PID)
			default:
				fmt.Fprintf(inv.stdout, "workspace %s/%s was not running\n", owner, workspace)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&socket, "socket", "", "The launcher's socket (DIR/launcher/launcher.sock)")
	cmd.Flags().StringVar(&owner, "owner", "", "The workspace owner's user name")
	cmd.Flags().StringVar(&workspace, "workspace", "", "The workspace's name")
	cmd.Flags().StringArrayVar(&envNames, "env", nil, "Name of an environment variable to pass on (repeatable)")
	return cmd
}
