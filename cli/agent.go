package cli

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/agent"
	"airgapcoder/codersdk"
	"airgapcoder/internal/buildinfo"
)

var agentOptions = options{
	{flag: "agent-url", env: "CODER_AGENT_URL"},
	{flag: "fallback-url", env: "CODER_AGENT_FALLBACK_URL"},
	{flag: "agent-token-file", env: "CODER_AGENT_TOKEN_FILE"},
	{flag: "startup-script-timeout", env: "CODER_AGENT_STARTUP_SCRIPT_TIMEOUT"},
}

// agentConfig is what `coder agent` runs with.
type agentConfig struct {
	URL                  string
	FallbackURL          string
	TokenFile            string
	StartupScriptTimeout time.Duration
}

func (inv *invocation) agentCmd() *cobra.Command {
	var cfg agentConfig
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the workspace agent (inside a workspace)",
		Long: `Run the workspace agent: it connects to coderd at CODER_AGENT_URL with the token in
CODER_AGENT_TOKEN (or the file --agent-token-file names), runs the startup script,
and serves every connection users open to this workspace through coderd (coder ssh,
coder port-forward, dev URLs). It opens no network port. Started by the init script
of a template's coder_agent; it stops cleanly on SIGINT or SIGTERM. When it exits it
removes the folder CODER_AGENT_BINARY_DIR names, if that is the init script's download
folder of its own binary.

With --fallback-url (CODER_AGENT_FALLBACK_URL, which the init script sets when the
agent URL is a region's workspace proxy) the agent connects to the fallback URL, the
primary, after 2 attempts in a row to reach the agent URL fail (no answer, or a 5xx),
and returns to the agent URL once its /healthz answers 200 (asked every 5 s).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir := inv.getenv(agent.BinaryDirEnv); dir != "" {
				defer func() {
					if err := agent.RemoveBinaryDir(dir); err != nil {
						inv.logger().Warn("leaving the agent's download folder", "err", err)
					}
				}()
			}
			if err := agentOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			if cfg.URL == "" {
				return usageErrorf("--agent-url (CODER_AGENT_URL) is required: the deployment's access URL")
			}
			u, err := parseDeploymentURL(cfg.URL)
			if err != nil {
				return err
			}
			token := inv.getenv("CODER_AGENT_TOKEN")
			if cfg.TokenFile != "" {
				b, err := os.ReadFile(cfg.TokenFile)
				if err != nil {
					return fmt.Errorf("read agent token: %w", err)
				}
				token = strings.TrimSpace(string(b))
			}
			if token == "" {
				return usageErrorf("the agent token is required: set CODER_AGENT_TOKEN (or --agent-token-file)")
			}
			var fallback *url.URL
			if cfg.FallbackURL != "" {
				if fallback, err = parseDeploymentURL(cfg.FallbackURL); err != nil {
					return fmt.Errorf("--fallback-url: %w", err)
				}
			}
			client := codersdk.New(u)
			client.SessionToken = token
			a, err := agent.New(agent.Options{
				Client: client, FallbackURL: fallback, Logger: inv.logger(), Version: buildinfo.Version(), Environ: inv.environ,
				StartupScriptTimeout: cfg.StartupScriptTimeout,
			})
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.URL, "agent-url", "", "Access URL of the deployment (CODER_AGENT_URL)")
	f.StringVar(&cfg.FallbackURL, "fallback-url", "", "URL of the primary, used while the agent URL (a workspace proxy) does not answer (CODER_AGENT_FALLBACK_URL)")
	f.StringVar(&cfg.TokenFile, "agent-token-file", "", "File holding the agent token, instead of CODER_AGENT_TOKEN (CODER_AGENT_TOKEN_FILE)")
	f.DurationVar(&cfg.StartupScriptTimeout, "startup-script-timeout", 0, "Stop a startup script that runs longer and report start_timeout; 0 means no limit")
	return cmd
}
