package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

// Commands that run inside a workspace and talk to coderd as its agent:
// `coder external-auth access-token` (here) and `coder gitaskpass`
// (gitaskpass.go). The agent gives what they start with CODER_AGENT_URL
// and CODER_AGENT_TOKEN_FILE (agent/gitaskpass.go); CODER_AGENT_TOKEN works
// too, as in Coder.

var agentClientOptions = options{
	{flag: "agent-url", env: "CODER_AGENT_URL"},
	{flag: "agent-token-file", env: "CODER_AGENT_TOKEN_FILE"},
}

// agentClientConfig is how a command inside a workspace reaches coderd as
// the workspace's agent.
type agentClientConfig struct {
	// URL is the deployment's URL as the agent knows it.
	URL string
	// TokenFile holds the agent token; CODER_AGENT_TOKEN wins over it.
	TokenFile string
}

// errNotInWorkspace is what a command that needs the agent says outside
// a workspace.
var errNotInWorkspace = errors.New("no agent token found (CODER_AGENT_TOKEN_FILE or CODER_AGENT_TOKEN): this command must be run from inside a running workspace")

// agentClient is a client of coderd whose session token is the agent
// token. It trusts what the agent trusts: the system's CAs and
// SSL_CERT_FILE, which the init script sets to the deployment's CA.
func (inv *invocation) agentClient(cfg agentClientConfig) (*codersdk.Client, error) {
	token := inv.getenv("CODER_AGENT_TOKEN")
	if token == "" && cfg.TokenFile != "" {
		b, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("read agent token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return nil, errNotInWorkspace
	}
	if cfg.URL == "" {
		return nil, errors.New("no agent URL (CODER_AGENT_URL): this command must be run from inside a running workspace")
	}
	u, err := parseDeploymentURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	c := codersdk.New(u)
	c.SessionToken = token
	return c, nil
}

// agentClientFlags adds --agent-url and --agent-token-file to cmd.
func agentClientFlags(cmd *cobra.Command, cfg *agentClientConfig) {
	f := cmd.Flags()
	f.StringVar(&cfg.URL, "agent-url", "", "URL of the deployment as the workspace's agent reaches it (CODER_AGENT_URL; the agent sets it)")
	f.StringVar(&cfg.TokenFile, "agent-token-file", "", "File holding the agent token (CODER_AGENT_TOKEN_FILE; the agent sets it); CODER_AGENT_TOKEN wins over it")
}

func (inv *invocation) externalAuthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "external-auth",
		Short: "Use your external auth links (Git providers) inside a workspace",
		Long: `Use, from inside a workspace, the accounts you linked to the deployment's external
auth providers (its Git servers and other OAuth2 services) on the dashboard's
external auth page. git needs no command: the agent sets GIT_ASKPASS so that git
asks the deployment for your token by itself.`,
	}
	cmd.AddCommand(inv.externalAuthAccessTokenCmd())
	return cmd
}

func (inv *invocation) externalAuthAccessTokenCmd() *cobra.Command {
	var (
		cfg   agentClientConfig
		extra string
	)
	cmd := &cobra.Command{
		Use:   "access-token PROVIDER",
		Short: "Print your access token for an external auth provider",
		Long: `Print your access token for the external auth provider PROVIDER (its id), fresh
and validated, with exit code 0. If you have not linked the provider yet, or the
link is no longer valid, print the URL that links it instead, with exit code 1.
Run it inside a workspace: it asks the deployment as the workspace's agent.

Ensure that the user is authenticated with the provider "gitea" before cloning:

  #!/bin/sh
  if OUTPUT=$(coder external-auth access-token gitea); then
    echo "Authenticated with Gitea"
  else
    echo "Please authenticate with Gitea: $OUTPUT"
  fi

Print a property of the token's "extra" fields (path with dots, e.g. a.b.0):

  coder external-auth access-token slack --extra "authed_user.id"`,
		Args: exactArgs(1, "PROVIDER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := agentClientOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			client, err := inv.agentClient(cfg)
			if err != nil {
				return err
			}
			resp, err := client.WorkspaceAgentExternalAuth(cmd.Context(), codersdk.ExternalAuthRequest{ID: args[0]})
			if err != nil {
				return fmt.Errorf("get the %s access token: %w", args[0], err)
			}
			if resp.URL != "" {
				fmt.Fprint(inv.stdout, resp.URL)
				return &exitCodeError{code: 1}
			}
			if extra == "" {
				fmt.Fprint(inv.stdout, resp.AccessToken)
				return nil
			}
			if resp.TokenExtra == nil {
				return errors.New("the token has no extra properties")
			}
			v, _ := lookupExtra(resp.TokenExtra, extra)
			fmt.Fprint(inv.stdout, v)
			return nil
		},
	}
	agentClientFlags(cmd, &cfg)
	cmd.Flags().StringVar(&extra, "extra", "", `Print this field of the token's "extra" properties instead (a path with dots, e.g. authed_user.id)`)
	return cmd
}

// lookupExtra follows path (keys and array indexes separated by dots)
// into the token's extra properties, as Coder's --extra does: a string is
// printed as it is, anything else as JSON; a path that leads nowhere is
// "" and false.
func lookupExtra(extra map[string]any, path string) (string, bool) {
	var v any = extra
	for _, key := range strings.Split(path, ".") {
		switch node := v.(type) {
		case map[string]any:
			next, ok := node[key]
			if !ok {
				return "", false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(node) {
				return "", false
			}
			v = node[i]
		default:
			return "", false
		}
	}
	switch val := v.(type) {
	case nil:
		return "", true
	case string:
		return val, true
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", false
	}
	return string(b), true
}
