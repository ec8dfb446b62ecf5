package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
	"airgapcoder/internal/buildinfo"
	"airgapcoder/wsproxy"
)

// `coder wsproxy`: workspace proxies, as Coder's (docs/wsproxy.md). Owners
// create, list and delete them; `coder wsproxy server` runs one.

func (inv *invocation) wsproxyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use: "wsproxy", Aliases: []string{"workspace-proxy"}, Short: "Manage and run workspace proxies (regions)",
		Long: `Manage and run workspace proxies. A proxy serves a region of the deployment near its
workspaces and users, without access to the database: an owner creates it and gets its
token once, then starts it with coder wsproxy server, which registers with the deployment
(the primary) and heartbeats. coder wsproxy ls shows each proxy's status: ok, unhealthy
(its own health report has errors), unreachable (no heartbeat within three intervals, or
shut down) or unregistered (never started).`,
	}
	client := inv.clientFlags
	cmd.AddCommand(client(inv.wsproxyCreateCmd()), client(inv.wsproxyListCmd()), client(inv.wsproxyDeleteCmd()), inv.wsproxyServerCmd())
	return cmd
}

func (inv *invocation) wsproxyCreateCmd() *cobra.Command {
	var req codersdk.CreateWorkspaceProxyRequest
	var onlyToken bool
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a workspace proxy and print its token, once (owners only)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := inv.client()
			if err != nil {
				return err
			}
			req.Name = args[0]
			res, err := client.CreateWorkspaceProxy(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("create workspace proxy %s: %w", req.Name, err)
			}
			if onlyToken {
				fmt.Fprintln(inv.stdout, res.ProxyToken)
				return nil
			}
			fmt.Fprintf(inv.stdout, `Workspace proxy %s created. Its token is shown only this once:

  %s

Start the proxy on a host of its region with:

  CODER_PROXY_SESSION_TOKEN=%s coder wsproxy server \
    --primary-access-url %s \
    --access-url https://PROXY-HOST \
    --tls-cert-file CERT.pem --tls-key-file KEY.pem
`, res.Proxy.Name, res.ProxyToken, res.ProxyToken, client.URL)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.DisplayName, "display-name", "", "Display name of the proxy (default: its name)")
	f.StringVar(&req.Icon, "icon", "", "Icon URL of the proxy")
	f.BoolVar(&onlyToken, "only-token", false, "Print only the token, for scripts")
	return cmd
}

func (inv *invocation) wsproxyListCmd() *cobra.Command {
	return listCommand(inv, &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List workspace proxies with their status (owners only)"},
		func(ctx context.Context, client *codersdk.Client) ([]codersdk.WorkspaceProxy, error) {
			return client.WorkspaceProxies(ctx)
		},
		[]string{"NAME", "URL", "STATUS", "VERSION", "LAST SEEN", "ERRORS"},
		func(p codersdk.WorkspaceProxy) []string {
			return []string{p.Name, orDash(p.PathAppURL), string(p.Status.Status), orDash(p.Version),
				agoFrom(p.Status.CheckedAt, p.LastSeenAt), orDash(strings.Join(p.Status.Report.Errors, "; "))}
		})
}

func (inv *invocation) wsproxyDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Delete a workspace proxy; its token is refused at once (owners only)",
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := inv.client()
			if err != nil {
				return err
			}
			if err := client.DeleteWorkspaceProxy(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("delete workspace proxy %s: %w", args[0], err)
			}
			fmt.Fprintf(inv.stdout, "Workspace proxy %s deleted; its token is refused from now on.\n", args[0])
			return nil
		},
	}
}

var wsproxyServerOptions = options{
	{flag: "primary-access-url", env: "CODER_PRIMARY_ACCESS_URL"},
	{flag: "proxy-session-token", env: "CODER_PROXY_SESSION_TOKEN"},
	{flag: "access-url", env: "CODER_ACCESS_URL"},
	{flag: "wildcard-access-url", env: "CODER_WILDCARD_ACCESS_URL"},
	{flag: "http-address", env: "CODER_HTTP_ADDRESS"},
	{flag: "tls-cert-file", env: "CODER_TLS_CERT_FILE"},
	{flag: "tls-key-file", env: "CODER_TLS_KEY_FILE"},
	{flag: "ca-file", env: "CODER_CA_FILE"},
	logFormatOption,
}

// wsproxyServerConfig is what coder wsproxy server's flags say.
type wsproxyServerConfig struct {
	primaryAccessURL, token, accessURL, wildcard, httpAddress, certFile, keyFile, caFile string
}

func (inv *invocation) wsproxyServerCmd() *cobra.Command {
	var cfg wsproxyServerConfig
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a workspace proxy: register with the primary, heartbeat, serve the region",
		Long: `Run a workspace proxy. It registers with the deployment at --primary-access-url with the
token coder wsproxy create printed, registers again every heartbeat interval the primary
names, and deregisters when stopped (SIGTERM, Ctrl-C). It never connects to the database.
It serves HTTPS with --tls-cert-file and --tls-key-file (the site's certificate, or the
appliance CA's: DIR/certs/server.pem and server-key.pem) at --http-address, and trusts
the system roots plus --ca-file (e.g. DIR/certs/trust.pem) to reach the primary.
If the primary refuses its token (the proxy was deleted), it stops with exit code 1.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := wsproxyServerOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			opts, err := cfg.options(inv)
			if err != nil {
				return err
			}
			opts.Logger = inv.loggerFor(cmd)
			srv, err := wsproxy.New(opts)
			if err != nil {
				return usageErrorf("%v", err)
			}
			return srv.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.primaryAccessURL, "primary-access-url", "", "Access URL of the deployment (coderd) the proxy registers with (CODER_PRIMARY_ACCESS_URL; required)")
	f.StringVar(&cfg.token, "proxy-session-token", "", "The proxy's token, as coder wsproxy create printed it (CODER_PROXY_SESSION_TOKEN; required)")
	f.StringVar(&cfg.accessURL, "access-url", "", "URL users reach this proxy at (CODER_ACCESS_URL; required)")
	f.StringVar(&cfg.wildcard, "wildcard-access-url", "", "Host name pattern of the region's subdomain apps, e.g. \"*.eu.example.internal\" (CODER_WILDCARD_ACCESS_URL)")
	f.StringVar(&cfg.httpAddress, "http-address", wsproxy.DefaultHTTPAddress, "Bind address, HTTPS with --tls-cert-file, else plain HTTP for an http access URL (CODER_HTTP_ADDRESS)")
	f.StringVar(&cfg.certFile, "tls-cert-file", "", "PEM certificate (chain) the proxy serves (CODER_TLS_CERT_FILE)")
	f.StringVar(&cfg.keyFile, "tls-key-file", "", "PEM private key of --tls-cert-file (CODER_TLS_KEY_FILE)")
	f.StringVar(&cfg.caFile, "ca-file", "", "PEM CA certificates trusted for the primary besides the system's (CODER_CA_FILE)")
	logFormatFlag(cmd)
	return cmd
}

// options turns the flags into the proxy's options, naming the flag of a
// bad value.
func (cfg wsproxyServerConfig) options(inv *invocation) (wsproxy.Options, error) {
	var opts wsproxy.Options
	switch {
	case cfg.primaryAccessURL == "":
		return opts, usageErrorf("--primary-access-url (CODER_PRIMARY_ACCESS_URL) is required: the deployment's access URL")
	case cfg.token == "":
		return opts, usageErrorf("--proxy-session-token (CODER_PROXY_SESSION_TOKEN) is required: coder wsproxy create prints it")
	case cfg.accessURL == "":
		return opts, usageErrorf("--access-url (CODER_ACCESS_URL) is required: the URL users reach this proxy at")
	case (cfg.certFile == "") != (cfg.keyFile == ""):
		return opts, usageErrorf("--tls-cert-file and --tls-key-file go together")
	}
	primary, err := parseDeploymentURL(cfg.primaryAccessURL)
	if err != nil {
		return opts, usageErrorf("--primary-access-url: %v", err)
	}
	access, err := url.Parse(cfg.accessURL)
	if err != nil || access.Host == "" || (access.Scheme != "http" && access.Scheme != "https") {
		return opts, usageErrorf("--access-url %q is not a URL like https://eu.coder.example.internal", cfg.accessURL)
	}
	if access.Scheme == "https" && cfg.certFile == "" {
		return opts, usageErrorf("--access-url %s is https: give --tls-cert-file and --tls-key-file", access)
	}
	opts = wsproxy.Options{
		PrimaryAccessURL: primary, ProxySessionToken: cfg.token, AccessURL: access, WildcardAccessURL: cfg.wildcard,
		HTTPAddress: cfg.httpAddress, Version: buildinfo.Version(),
	}
	if cfg.certFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.certFile, cfg.keyFile)
		if err != nil {
			return opts, usageErrorf("--tls-cert-file %s / --tls-key-file %s: %v", cfg.certFile, cfg.keyFile, err)
		}
		opts.TLSCertificate = &cert
	}
	var caPEM []byte
	if cfg.caFile != "" {
		if caPEM, err = os.ReadFile(cfg.caFile); err != nil {
			return opts, usageErrorf("--ca-file: %v", err)
		}
	}
	if opts.HTTPClient, err = codersdk.NewHTTPClient(caPEM); err != nil {
		return opts, usageErrorf("--ca-file %s: %v", cfg.caFile, err)
	}
	return opts, nil
}
