package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

// `coder gitaskpass`: the agent sets GIT_ASKPASS to the coder binary in
// every process of the workspace, and git runs it with one argument, its
// prompt, when a remote asks for credentials:
//
//	Username for 'https://git.example:3000':
//	Password for 'https://user@git.example:3000':
//
// (git's credential_ask_one, each with a trailing space). Main recognises such a run
// (isGitAskpassRun) and runs the hidden gitaskpass command with the
// prompt, which asks coderd, as the agent, for the workspace owner's token
// for that URL (the provider whose regex matches it) and prints the user
// name or the password git should use. When the owner has not linked the
// provider yet, it prints where to link it on stderr (which git shows)
// and waits until they have. When no provider matches, it says so and
// exits 1: git then asks as it would without Coder.

// isGitAskpassRun reports whether the binary was run by git as its
// GIT_ASKPASS: one argument that is a user name or password prompt, and
// GIT_PREFIX in the environment (git sets it for what it runs), as Coder
// checks.
func isGitAskpassRun(args, environ []string) bool {
	if len(args) != 1 || (!strings.HasPrefix(args[0], "Username ") && !strings.HasPrefix(args[0], "Password ")) {
		return false
	}
	for _, kv := range environ {
		if strings.HasPrefix(kv, "GIT_PREFIX=") {
			return true
		}
	}
	return false
}

// askpassPrompt is a parsed git credential prompt.
type askpassPrompt struct {
	// Password is true for a password prompt, false for a user name one.
	Password bool
	// User is the user name in the URL (git puts it there once known).
	User string
	// URL is the remote without its user name: scheme and host, and the
	// path when git is configured with credential.useHttpPath.
	URL string
}

// parseAskpassPrompt parses a prompt git passes to GIT_ASKPASS:
// "Username for 'https://host': " or "Password for 'https://user@host': ".
// Only http and https URLs are git's (and the providers') to answer.
func parseAskpassPrompt(prompt string) (askpassPrompt, error) {
	var p askpassPrompt
	kind, rest, ok := strings.Cut(prompt, " for ")
	switch {
	case !ok:
		return p, fmt.Errorf("git prompt %q is not \"Username for '<url>': \" or \"Password for '<url>': \"", prompt)
	case kind == "Password":
		p.Password = true
	case kind != "Username":
		return p, fmt.Errorf("git prompt %q asks neither for a user name nor a password", prompt)
	}
	raw := strings.TrimLeft(strings.TrimSpace(rest), `"'`)
	raw = strings.TrimRight(raw, `"':`)
	u, err := url.Parse(raw)
	if err != nil {
		return p, fmt.Errorf("git prompt %q: parse URL: %w", prompt, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return p, fmt.Errorf("git prompt %q: the URL is not http or https", prompt)
	}
	if u.Host == "" {
		return p, fmt.Errorf("git prompt %q: the URL has no host", prompt)
	}
	p.User = u.User.Username()
	u.User = nil
	p.URL = u.String()
	return p, nil
}

// answer is what git should read for the prompt: the user name for a user
// name prompt; for a password prompt the password, or the user name when
// the provider's convention is the token as user name and no password
// (git asks for the password all the same), as Coder answers.
func (p askpassPrompt) answer(resp codersdk.ExternalAuthResponse) string {
	user := resp.Username
	if user == "" {
		user = resp.AccessToken
	}
	if p.Password && resp.Password != "" {
		return resp.Password
	}
	return user
}

func (inv *invocation) gitAskpassCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gitaskpass PROMPT",
		Short:  "Answer git's credential prompts with your external auth token (git runs it)",
		Hidden: true,
		Long: `Answer a git credential prompt (PROMPT, e.g. "Username for 'https://git.example': ")
with your token for the external auth provider whose regex matches the URL. The
workspace agent sets GIT_ASKPASS to the coder binary, and git runs it with the
prompt: there is no need to run it by hand. If you have not linked the provider yet,
it prints the URL to open and waits until you have.`,
		Args: exactArgs(1, "PROMPT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return inv.gitAskpass(cmd, args[0])
		},
	}
}

func (inv *invocation) gitAskpass(cmd *cobra.Command, prompt string) error {
	ctx := cmd.Context()
	p, err := parseAskpassPrompt(prompt)
	if err != nil {
		return err
	}
	client, err := inv.agentClient(agentClientConfig{URL: inv.getenv("CODER_AGENT_URL"), TokenFile: inv.getenv("CODER_AGENT_TOKEN_FILE")})
	if err != nil {
		return err
	}
	req := codersdk.ExternalAuthRequest{Match: p.URL}
	resp, err := client.WorkspaceAgentExternalAuth(ctx, req)
	if codersdk.IsStatus(err, http.StatusNotFound) {
		// No provider for this URL: git asks as it would without us.
		fmt.Fprintf(inv.stderr, "Coder was unable to handle this git request. The default git behavior will be used instead.\n  %s\n", err)
		return &exitCodeError{code: 1}
	}
	if err != nil {
		return fmt.Errorf("get the git token for %s: %w", p.URL, err)
	}
	if resp.URL != "" {
		name := providerName(resp)
		fmt.Fprintf(inv.stderr, "You must authenticate with %s to clone this repository. Open: %s\n", name, resp.URL)
		if resp, err = waitForLink(ctx, client, p.URL); err != nil {
			return fmt.Errorf("wait for the %s link: %w", name, err)
		}
		fmt.Fprintf(inv.stderr, "You've been authenticated with %s!\n", name)
	}
	fmt.Fprintln(inv.stdout, p.answer(resp))
	return nil
}

// waitForLink asks again with listen=true (coderd answers once the user
// has linked the provider) until there is a token: a listen that ends
// without one, or fails for a reason that may pass, is tried again with
// backoff (250ms doubling to 10s), until ctx ends (git, or the user with
// ^C, gives up).
func waitForLink(ctx context.Context, client *codersdk.Client, match string) (codersdk.ExternalAuthResponse, error) {
	b := &backoff.ExponentialBackOff{
		InitialInterval: 250 * time.Millisecond, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: 10 * time.Second,
	}
	b.Reset()
	return backoff.Retry(ctx, func() (codersdk.ExternalAuthResponse, error) {
		resp, err := client.WorkspaceAgentExternalAuth(ctx, codersdk.ExternalAuthRequest{Match: match, Listen: true})
		var apiErr *codersdk.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode >= 400 && apiErr.StatusCode < 500 &&
			apiErr.StatusCode != http.StatusRequestTimeout && apiErr.StatusCode != http.StatusTooManyRequests {
			return resp, backoff.Permanent(err)
		}
		if err == nil && resp.URL != "" {
			err = errors.New("not linked yet")
		}
		return resp, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
}

// providerName names the provider of a response for the user: its id,
// from the link page's URL (/external-auth/<id>), else its type.
func providerName(resp codersdk.ExternalAuthResponse) string {
	if u, err := url.Parse(resp.URL); err == nil {
		if i := strings.LastIndex(u.Path, "/external-auth/"); i >= 0 {
			id := strings.Trim(u.Path[i+len("/external-auth/"):], "/")
			if id, _, _ = strings.Cut(id, "/"); id != "" {
				if unescaped, err := url.PathUnescape(id); err == nil {
					return unescaped
				}
				return id
			}
		}
	}
	if resp.Type != "" {
		return resp.Type
	}
	return "the Git provider"
}
