package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"

	"airgapcoder/internal/atomicfile"
)

var loginOptions = options{
	{flag: "first-user-username", env: "CODER_FIRST_USER_USERNAME"},
	{flag: "first-user-email", env: "CODER_FIRST_USER_EMAIL"},
	{flag: "first-user-password", env: "CODER_FIRST_USER_PASSWORD"},
	{flag: "email", env: "CODER_EMAIL"},
	{flag: "password", env: "CODER_PASSWORD"},
}

func (inv *invocation) loginCmd() *cobra.Command {
	var first codersdk.CreateFirstUserRequest
	var email, password string
	cmd := &cobra.Command{
		Use:   "login URL",
		Short: "Log in to a deployment (creating its first user when it has none) and store the session",
		Args:  exactArgs(1, "URL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := loginOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			u, err := parseDeploymentURL(args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			client, err := inv.newClient(u)
			if err != nil {
				return err
			}
			if _, err := client.BuildInfo(ctx); err != nil {
				return fmt.Errorf("reach %s: %w", u, err)
			}
			token := inv.token
			if token == "" {
				hasFirst, err := client.HasFirstUser(ctx)
				if err != nil {
					return err
				}
				if !hasFirst {
					if first.Username == "" || first.Email == "" || first.Password == "" {
						msg := "%s has no users yet: create the first owner with --first-user-username, --first-user-email and --first-user-password"
						if m, err := client.AuthMethods(ctx); err == nil && !m.Password.Enabled {
							msg += " (password sign-in is disabled for everyone else, but owners keep theirs: the first owner then signs in with it, and others through single sign-on)"
						}
						return usageErrorf(msg, u)
					}
					if _, err := client.CreateFirstUser(ctx, first); err != nil {
						return fmt.Errorf("create first user: %w", err)
					}
					fmt.Fprintf(inv.stderr, "Created the first user %s (owner).\n", first.Username)
					if info, err := client.BuildInfo(ctx); err == nil && info.TemplatesImporting {
						fmt.Fprintln(inv.stderr, "Bundled templates are being imported; `coder templates list` shows them when ready.")
					}
					email, password = first.Email, first.Password
				}
				if email == "" || password == "" {
					// On a single sign-on deployment the browser signs in
					// and /cli-auth shows a token to paste (as Coder's CLI).
					if m, err := client.AuthMethods(ctx); err == nil && !m.Password.Enabled {
						if token, err = inv.promptToken(u.JoinPath(codersdk.CLIAuthPath).String(), m); err != nil {
							return err
						}
					} else if email, password, err = inv.promptCredentials(); err != nil {
						return err
					}
				}
				if token == "" {
					resp, err := client.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: email, Password: password})
					if err != nil {
						return fmt.Errorf("log in: %w", err)
					}
					token = resp.SessionToken
				}
			}
			client.SessionToken = token
			me, err := client.User(ctx, codersdk.Me)
			if err != nil {
				return fmt.Errorf("check session: %w", err)
			}
			if err := inv.storeSession(u.String(), token); err != nil {
				return err
			}
			if inv.caFile != "" {
				if err := inv.storeCA(); err != nil {
					return err
				}
			}
			fmt.Fprintf(inv.stdout, "Logged in to %s as %s.\n", u, me.Username)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&first.Username, "first-user-username", "", "Username of the first owner, when the deployment has no users")
	f.StringVar(&first.Email, "first-user-email", "", "Email of the first owner")
	f.StringVar(&first.Password, "first-user-password", "", "Password of the first owner")
	f.StringVar(&email, "email", "", "Email (or username) to log in with")
	f.StringVar(&password, "password", "", "Password to log in with")
	// Persistent, so that globalOptions layers them from the environment
	// as it does the client commands' (clientFlags).
	pf := cmd.PersistentFlags()
	pf.StringVar(&inv.token, "token", "", "Log in with this session token instead of a password (CODER_SESSION_TOKEN)")
	pf.StringVar(&inv.caFile, "ca-file", "", "PEM CA certificates to trust for the deployment besides the system's, kept for later commands (CODER_CA_FILE)")
	return cmd
}

// promptToken asks for the session token the dashboard's /cli-auth page
// shows once the user signed in there, and reads it from stdin.
func (inv *invocation) promptToken(cliAuthURL string, m codersdk.AuthMethods) (string, error) {
	how := "sign in"
	if m.OIDC.Enabled {
		how = "sign in with " + m.OIDC.SignInText
	}
	fmt.Fprintf(inv.stderr, "Password sign-in is disabled on this deployment. Open this page in a browser, %s, and create a session token:\n\n  %s\n\nPaste the token here: ", how, cliAuthURL)
	token, err := bufio.NewReader(inv.stdin).ReadString('\n')
	token = strings.TrimSpace(token)
	if token == "" {
		if err == nil {
			err = errors.New("empty")
		}
		return "", usageErrorf("no session token (%v): open %s in a browser, or pass --token", err, cliAuthURL)
	}
	return token, nil
}

// promptCredentials reads email and password from stdin, one per line.
func (inv *invocation) promptCredentials() (string, string, error) {
	if f, ok := inv.stdin.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice == 0 && st.Size() == 0 && st.Mode().IsRegular() {
			return "", "", usageErrorf("no credentials: pass --email and --password")
		}
	}
	r := bufio.NewReader(inv.stdin)
	fmt.Fprint(inv.stderr, "Email: ")
	email, err := r.ReadString('\n')
	if err != nil && email == "" {
		return "", "", usageErrorf("no credentials: pass --email and --password")
	}
	fmt.Fprint(inv.stderr, "Password: ")
	password, err := r.ReadString('\n')
	if err != nil && password == "" {
		return "", "", usageErrorf("no password: pass --password")
	}
	return strings.TrimSpace(email), strings.TrimRight(password, "\r\n"), nil
}

func (inv *invocation) storeSession(url, token string) error {
	if err := os.MkdirAll(inv.globalConfig, 0o700); err != nil {
		return fmt.Errorf("create config dir: %w", err)
	}
	for name, content := range map[string]string{urlFile: url, sessionFile: token} {
		if err := atomicfile.Write(filepath.Join(inv.globalConfig, name), []byte(content), 0o600); err != nil {
			return fmt.Errorf("store session: %w", err)
		}
	}
	return nil
}

func (inv *invocation) logoutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "End the stored session",
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := inv.client()
			if err != nil {
				return err
			}
			if err := client.Logout(cmd.Context()); err != nil && !codersdk.IsStatus(err, 401) {
				return err
			}
			if err := os.Remove(filepath.Join(inv.globalConfig, sessionFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			fmt.Fprintln(inv.stdout, "Logged out.")
			return nil
		},
	}
}
