package cli

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
	"airgapcoder/internal/buildinfo"
	"airgapcoder/provisionerd"
	"airgapcoder/terraform"
)

var provisionerdOptions = slices.Concat(options{
	{flag: "psk", env: "CODER_PROVISIONER_DAEMON_PSK"},
	{flag: "name", env: "CODER_PROVISIONER_DAEMON_NAME"},
	{flag: "tag", env: "CODER_PROVISIONER_DAEMON_TAGS"},
	{flag: "cache-dir", env: "CODER_CACHE_DIRECTORY"},
	{flag: "agent-url", env: "CODER_PROVISIONER_DAEMON_AGENT_URL"},
	logFormatOption,
}, terraformOptions)

// terraformOptions map the flags terraformFlags declares to the environment.
var terraformOptions = options{
	{flag: "terraform-path", env: "CODER_TERRAFORM_PATH"},
	{flag: "terraform-version", env: "CODER_TERRAFORM_VERSION"},
	{flag: "terraform-download", env: "CODER_TERRAFORM_DOWNLOAD"},
	{flag: "provider-mirror", env: "CODER_PROVIDER_MIRROR"},
	{flag: "module-mirror", env: "CODER_MODULE_MIRROR"},
	{flag: "ca-cert-file", env: "CODER_CA_CERT_FILE"},
}

// terraformFlags declares the flags shared by coder server (for its built-in
// daemons) and coder provisionerd start.
func terraformFlags(cmd *cobra.Command, tf *terraform.Options, mirror, modules, caFile *string) {
	f := cmd.Flags()
	f.StringVar(&tf.Path, "terraform-path", "", "terraform binary of the pinned version (default: search the PATH)")
	f.StringVar(&tf.Version, "terraform-version", terraform.DefaultVersion, "Exact terraform version required")
	f.BoolVar(&tf.AllowDownload, "terraform-download", false, "On a connected host, download the pinned terraform (GPG-verified) when it is missing")
	f.StringVar(mirror, "provider-mirror", "", "Provider mirror: a folder (filesystem_mirror) or an https URL (network_mirror); the only provider source terraform gets")
	f.StringVar(modules, "module-mirror", "", "Module registry mirror: the https URL of coder mirror serve's /terraform/modules/; registry module sources resolve against it")
	f.StringVar(caFile, "ca-cert-file", "", "PEM bundle trusted by terraform and carried in agent init scripts")
}

// checkModuleMirror refuses a module mirror that is not an https URL.
func checkModuleMirror(m string) error {
	if m != "" && !strings.HasPrefix(m, "https://") {
		return usageErrorf("--module-mirror %s: want the https URL of a mirror's /terraform/modules/", m)
	}
	return nil
}

// checkAgentURL refuses an --agent-url that is not an http(s) URL with a
// host ("" is the default: the daemon's --url).
func checkAgentURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return usageErrorf("--agent-url %s: want the http(s) URL agents connect to, e.g. https://eu-proxy.example.internal", raw)
	}
	return nil
}

func absMirror(m string) (string, error) {
	if m == "" || filepath.IsAbs(m) || len(m) > 8 && m[:8] == "https://" {
		return m, nil
	}
	if len(m) > 7 && m[:7] == "http://" {
		return "", usageErrorf("--provider-mirror %s: terraform network mirrors must be https", m)
	}
	abs, err := filepath.Abs(m)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return "", usageErrorf("--provider-mirror %s is not a folder", m)
	}
	return abs, nil
}

func (inv *invocation) provisionerdCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "provisionerd", Short: "Run an external provisioner daemon"}
	var (
		psk, name, mirror, modules, caFile, cacheDir, agentURL string
		tags                                                   []string
		tf                                                     terraform.Options
	)
	start := &cobra.Command{
		Use:   "start",
		Short: "Take jobs from coderd and run them with the pinned terraform",
		Long: `Take provisioner jobs from the deployment at CODER_URL. Authenticate with the
deployment's pre-shared key (--psk) or a session token (an owner or template admin
for organization daemons; any user with --tag scope=user).

The workspaces this daemon builds give their agents --agent-url as CODER_AGENT_URL
(default: --url). A region's daemon (tagged for the region's templates) points it at
the region's workspace proxy: the agents in that region then connect to their proxy,
and users who connect through it (coder ssh --proxy) stay in the region.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := provisionerdOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			tagMap, err := parseKeyValues("tag", tags)
			if err != nil {
				return err
			}
			if mirror, err = absMirror(mirror); err != nil {
				return err
			}
			if err := checkModuleMirror(modules); err != nil {
				return err
			}
			if err := checkAgentURL(agentURL); err != nil {
				return err
			}
			var client *codersdk.Client
			if psk != "" {
				if inv.url == "" {
					return usageErrorf("--url (CODER_URL) is required with --psk")
				}
				u, err := parseDeploymentURL(inv.url)
				if err != nil {
					return err
				}
				if client, err = inv.newClient(u, caFile); err != nil {
					return err
				}
				client.ProvisionerPSK = psk
			} else if client, err = inv.client(caFile); err != nil {
				return fmt.Errorf("%w (or pass --psk)", err)
			}
			ctx := cmd.Context()
			tf.InstallDir = filepath.Join(cacheDir, "terraform")
			logger := inv.loggerFor(cmd)
			tf.Logger = logger
			path, err := terraform.Find(ctx, tf)
			if err != nil {
				return err
			}
			d, err := provisionerd.New(provisionerd.Options{
				Client: client, Name: name, Tags: tagMap, Version: buildinfo.Version(), TerraformPath: path,
				ProviderMirror: mirror, ModuleMirror: modules, CACertFile: caFile, WorkDir: filepath.Join(cacheDir, "provisionerd"), Logger: logger,
				// Agents fall back to the daemon's own coderd URL while
				// --agent-url (a region's proxy) does not answer; New drops
				// it when it is the agent URL.
				AccessURL: agentURL, AgentFallbackURL: client.URL.String(),
			})
			if err != nil {
				return err
			}
			if err := d.Register(ctx); err != nil {
				return err
			}
			fmt.Fprintf(inv.stderr, "Provisioner %s is waiting for jobs (tags %s).\n", name, tagString(tagMap))
			return d.Run(ctx)
		},
	}
	host, _ := os.Hostname()
	f := start.Flags()
	f.StringVar(&psk, "psk", "", "Pre-shared key of the deployment (CODER_PROVISIONER_DAEMON_PSK)")
	f.StringVar(&name, "name", host, "Daemon name shown in listings")
	f.StringArrayVarP(&tags, "tag", "t", nil, "Tag key=value this daemon carries (repeatable)")
	f.StringVar(&cacheDir, "cache-dir", defaultCacheDir(), "Cache directory (terraform plugins, job folders)")
	f.StringVar(&agentURL, "agent-url", "", "URL the agents of the workspaces this daemon builds connect to (their CODER_AGENT_URL), e.g. the region's workspace proxy; default --url")
	terraformFlags(start, &tf, &mirror, &modules, &caFile)
	logFormatFlag(start)
	cmd.AddCommand(start)
	return cmd
}
