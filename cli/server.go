package cli

import (
	"slices"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/coderd"
	"airgapcoder/controlplane"
	"airgapcoder/internal/buildinfo"
)

var serverOptions = slices.Concat(options{
	{flag: "http-address", env: "CODER_HTTP_ADDRESS"},
	{flag: "access-url", env: "CODER_ACCESS_URL"},
	{flag: "wildcard-access-url", env: "CODER_WILDCARD_ACCESS_URL"},
	{flag: "postgres-url", env: "CODER_PG_CONNECTION_URL"},
	{flag: "provisioner-daemons", env: "CODER_PROVISIONER_DAEMONS"},
	{flag: "provisioner-daemon-psk", env: "CODER_PROVISIONER_DAEMON_PSK"},
	{flag: "provisioner-job-heartbeat-timeout", env: "CODER_PROVISIONER_JOB_HEARTBEAT_TIMEOUT"},
	{flag: "telemetry", env: "CODER_TELEMETRY_ENABLE"},
	{flag: "telemetry-url", env: "CODER_TELEMETRY_URL"},
	{flag: "update-check", env: "CODER_UPDATE_CHECK"},
	{flag: "update-check-url", env: "CODER_UPDATE_CHECK_URL"},
	{flag: "block-direct-connections", env: "CODER_BLOCK_DIRECT"},
	{flag: "tls-enable", env: "CODER_TLS_ENABLE"},
	{flag: "tls-address", env: "CODER_TLS_ADDRESS"},
	{flag: "tls-cert-file", env: "CODER_TLS_CERT_FILE"},
	{flag: "tls-key-file", env: "CODER_TLS_KEY_FILE"},
	{flag: "strict-transport-security", env: "CODER_STRICT_TRANSPORT_SECURITY"},
	{flag: "cache-dir", env: "CODER_CACHE_DIRECTORY"},
	{flag: "postgres-run-as", env: "CODER_BUILTIN_POSTGRES_USER"},
	{flag: "shutdown-timeout", env: "CODER_SHUTDOWN_TIMEOUT"},
	logFormatOption,
	{flag: "api-rate-limit", env: "CODER_API_RATE_LIMIT"},
	{flag: "login-rate-limit", env: "CODER_LOGIN_RATE_LIMIT"},
	{flag: "login-rate-limit-ip", env: "CODER_LOGIN_RATE_LIMIT_IP"},
	{flag: "audit-retention", env: "CODER_AUDIT_RETENTION"},
	{flag: "autobuild-poll-interval", env: "CODER_AUTOBUILD_POLL_INTERVAL"},
	{flag: "prometheus-enable", env: "CODER_PROMETHEUS_ENABLE"},
	{flag: "prometheus-address", env: "CODER_PROMETHEUS_ADDRESS"},
	{flag: "oidc-issuer-url", env: "CODER_OIDC_ISSUER_URL"},
	{flag: "oidc-client-id", env: "CODER_OIDC_CLIENT_ID"},
	{flag: "oidc-client-secret", env: "CODER_OIDC_CLIENT_SECRET"},
	{flag: "oidc-client-secret-file", env: "CODER_OIDC_CLIENT_SECRET_FILE"},
	{flag: "oidc-email-domain", env: "CODER_OIDC_EMAIL_DOMAIN"},
	{flag: "oidc-scopes", env: "CODER_OIDC_SCOPES"},
	{flag: "oidc-allow-signups", env: "CODER_OIDC_ALLOW_SIGNUPS"},
	{flag: "oidc-username-field", env: "CODER_OIDC_USERNAME_FIELD"},
	{flag: "oidc-email-field", env: "CODER_OIDC_EMAIL_FIELD"},
	{flag: "oidc-ignore-email-verified", env: "CODER_OIDC_IGNORE_EMAIL_VERIFIED"},
	{flag: "oidc-sign-in-text", env: "CODER_OIDC_SIGN_IN_TEXT"},
	{flag: "oidc-icon-url", env: "CODER_OIDC_ICON_URL"},
	{flag: "oidc-group-field", env: "CODER_OIDC_GROUP_FIELD"},
	{flag: "oidc-group-mapping", env: "CODER_OIDC_GROUP_MAPPING"},
	{flag: "oidc-group-auto-create", env: "CODER_OIDC_GROUP_AUTO_CREATE"},
	{flag: "oidc-group-regex-filter", env: "CODER_OIDC_GROUP_REGEX_FILTER"},
	{flag: "oidc-allowed-groups", env: "CODER_OIDC_ALLOWED_GROUPS"},
	{flag: "oidc-user-role-field", env: "CODER_OIDC_USER_ROLE_FIELD"},
	{flag: "oidc-user-role-mapping", env: "CODER_OIDC_USER_ROLE_MAPPING"},
	{flag: "disable-password-auth", env: "CODER_DISABLE_PASSWORD_AUTH"},
}, terraformOptions) // provisionerd.go

func defaultCacheDir() string {
	return cacheDirFor("coder")
}

func (inv *invocation) serverCmd() *cobra.Command {
	var (
		cfg          controlplane.Config
		configPath   string
		blockDirect  bool
		pprofAddress string
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane (coderd): API, workspace relay, provisioner job queue",
		Long: `Run the control plane. Without --postgres-url it runs the built-in PostgreSQL,
keeping its data under the global config dir. Telemetry and the update check are
off by default and, when on, go only to the URLs you configure.

External auth providers (the Git server users link their accounts to) are set
with environment variables, as Coder's: CODER_EXTERNAL_AUTH_<n>_<FIELD> for
n = 0, 1, … and FIELD one of ID, TYPE, CLIENT_ID, CLIENT_SECRET (or
CLIENT_SECRET_FILE), AUTH_URL, TOKEN_URL, VALIDATE_URL, REGEX, SCOPES,
DISPLAY_NAME, DISPLAY_ICON, NO_REFRESH, EXTRA_TOKEN_KEYS (docs/external-auth.md).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := serverOptions.resolve(cmd, configPathFrom(cmd, inv.environ), inv.environ); err != nil {
				return err
			}
			mirror, err := absMirror(cfg.Provisioner.ProviderMirror)
			if err != nil {
				return err
			}
			cfg.Provisioner.ProviderMirror = mirror
			if cfg.ExternalAuth.Providers, err = controlplane.ExternalAuthFromEnv(inv.environ); err != nil {
				return usageErrorf("%v", err)
			}
			if err := checkModuleMirror(cfg.Provisioner.ModuleMirror); err != nil {
				return err
			}
			cfg.ConfigDir = inv.globalConfig
			cfg.Version = buildinfo.Version()
			cfg.Logger, cfg.RecentLogs = inv.loggerWithRecentLogs(cmd)
			// 0 on the command line turns a limit off; coderd reads 0 as its default.
			for _, limit := range []*int{&cfg.RateLimits.API, &cfg.RateLimits.LoginPerAccount, &cfg.RateLimits.LoginPerIP} {
				if *limit <= 0 {
					*limit = -1
				}
			}
			if blockDirect {
				cfg.Logger.Warn("--block-direct-connections (CODER_BLOCK_DIRECT) has no effect: every workspace connection is relayed through coderd already")
			}
			srv, err := controlplane.New(cfg)
			if err != nil {
				return usageErrorf("%v", err)
			}
			if pprofAddress != "" {
				stop, err := controlplane.ServePprof(pprofAddress, cfg.Logger)
				if err != nil {
					return err
				}
				defer stop()
			}
			return srv.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "YAML config file; keys are flag names (CODER_CONFIG_PATH)")
	f.StringVar(&cfg.HTTPAddress, "http-address", "127.0.0.1:3000", "HTTP bind address")
	f.StringVar(&cfg.AccessURL, "access-url", "", "URL users and workspaces reach this deployment at (default: the listener)")
	f.StringVar(&cfg.WildcardAccessURL, "wildcard-access-url", "", "Host name pattern of subdomain apps, e.g. \"*.apps.example.internal\" (a DNS record sends it to this server; app URLs use the access URL's port)")
	f.StringVar(&cfg.PostgresURL, "postgres-url", "", "External PostgreSQL URL; empty runs the built-in PostgreSQL")
	f.IntVar(&cfg.ProvisionerDaemons, "provisioner-daemons", 3, "Built-in provisioner daemons; 0 disables them")
	f.StringVar(&cfg.ProvisionerPSK, "provisioner-daemon-psk", "", "Pre-shared key external provisioner daemons authenticate with")
	f.DurationVar(&cfg.JobHeartbeatTimeout, "provisioner-job-heartbeat-timeout", 60*time.Second, "Fail a running job whose provisioner has been silent this long")
	f.BoolVar(&cfg.Telemetry, "telemetry", false, "Send usage telemetry to --telemetry-url (off by default)")
	f.StringVar(&cfg.TelemetryURL, "telemetry-url", "", "Telemetry collector URL (required with --telemetry)")
	f.BoolVar(&cfg.UpdateCheck, "update-check", false, "Check --update-check-url for new releases (off by default)")
	f.StringVar(&cfg.UpdateCheckURL, "update-check-url", "", "Release feed URL returning {\"version\",\"url\"} (required with --update-check)")
	// Accepted for scripts written for Coder; hidden because it changes
	// nothing here (docs/relay.md).
	f.BoolVar(&blockDirect, "block-direct-connections", false, "No effect: every workspace connection is relayed through coderd")
	_ = f.MarkHidden("block-direct-connections")
	f.BoolVar(&cfg.TLS.Enable, "tls-enable", false, "Serve HTTPS on --tls-address")
	f.StringVar(&cfg.TLS.Address, "tls-address", "127.0.0.1:3443", "HTTPS bind address")
	f.StringVar(&cfg.TLS.CertFile, "tls-cert-file", "", "PEM certificate (chain) for HTTPS")
	f.StringVar(&cfg.TLS.KeyFile, "tls-key-file", "", "PEM private key for HTTPS")
	f.IntVar(&cfg.TLS.StrictTransportSecurity, "strict-transport-security", 365*24*3600, "max-age in seconds of the Strict-Transport-Security header on HTTPS responses; 0 sends none")
	f.StringVar(&cfg.CacheDir, "cache-dir", defaultCacheDir(), "Cache directory (PostgreSQL binaries)")
	f.StringVar(&cfg.BuiltinPostgres.RunAsUser, "postgres-run-as", "", "User that runs the built-in PostgreSQL when coder server runs as root (default nobody)")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "How long in-flight requests may take to finish on shutdown")
	terraformFlags(cmd, &cfg.Provisioner.Terraform, &cfg.Provisioner.ProviderMirror, &cfg.Provisioner.ModuleMirror, &cfg.Provisioner.CACertFile)
	logFormatFlag(cmd)
	f.IntVar(&cfg.RateLimits.API, "api-rate-limit", coderd.DefaultAPIRateLimit, "API requests per minute allowed per session token, or per IP address without one; 0 (or negative) turns the limit off. Kept in each replica's memory")
	f.IntVar(&cfg.RateLimits.LoginPerAccount, "login-rate-limit", coderd.DefaultLoginRateLimit, "Failed password logins allowed per account and source IP address before further attempts from there wait (1 s, doubling to 5 min; answered 429); 0 turns the limit off")
	f.IntVar(&cfg.RateLimits.LoginPerIP, "login-rate-limit-ip", coderd.DefaultLoginRateLimitPerIP, "Failed password logins per minute allowed per source IP address, over all accounts; 0 turns the limit off")
	f.DurationVar(&cfg.AuditRetention, "audit-retention", 0, "Delete audit log records older than this, hourly (e.g. 2160h); 0 keeps them forever")
	// Coder's hidden flag: how often the workspace lifecycle scheduler
	// looks for workspaces to stop, start, mark dormant or delete
	// (docs/schedules.md). Tests set seconds; deployments keep the minute.
	f.DurationVar(&cfg.Lifecycle.Tick, "autobuild-poll-interval", coderd.DefaultLifecycleTick, "How often the lifecycle scheduler looks for workspaces to autostart, autostop, mark dormant or delete")
	_ = f.MarkHidden("autobuild-poll-interval")
	f.BoolVar(&cfg.Prometheus.Enable, "prometheus-enable", false, "Serve Prometheus metrics at /metrics on --prometheus-address (never on the public listeners)")
	f.StringVar(&cfg.Prometheus.Address, "prometheus-address", controlplane.DefaultPrometheusAddress, "Bind address of the Prometheus metrics listener")
	oidcFlags(cmd, &cfg.OIDC)
	// Coder's flag: Go's profiles of the running server (go tool pprof
	// http://ADDRESS/debug/pprof/heap), for load tests (bench/README.md).
	// Hidden: a debugging aid without authentication; bind it to loopback.
	f.StringVar(&pprofAddress, "pprof-address", "", "Serve Go's pprof profiles at /debug/pprof/ on this address (e.g. 127.0.0.1:6060); empty serves none")
	_ = f.MarkHidden("pprof-address")
	f.BoolVar(&cfg.DisablePasswordAuth, "disable-password-auth", false, "Refuse password sign-in; owners may still sign in with a password so that they cannot be locked out")
	return cmd
}

// oidcFlags declares OpenID Connect sign-in's flags (docs/oidc.md), with
// Coder's names and defaults.
func oidcFlags(cmd *cobra.Command, c *controlplane.OIDCConfig) {
	f := cmd.Flags()
	f.StringVar(&c.IssuerURL, "oidc-issuer-url", "", "Issuer URL of the OpenID Connect identity provider; turns OIDC sign-in on. Register <access URL>/api/v2/users/oidc/callback as its redirect URI")
	f.StringVar(&c.ClientID, "oidc-client-id", "", "Client ID registered at the identity provider")
	f.StringVar(&c.ClientSecret, "oidc-client-secret", "", "Client secret registered at the identity provider")
	f.StringVar(&c.ClientSecretFile, "oidc-client-secret-file", "", "File holding the client secret (wins over --oidc-client-secret)")
	f.StringSliceVar(&c.EmailDomain, "oidc-email-domain", nil, "Email domains allowed to sign in, comma separated; empty allows any")
	f.StringSliceVar(&c.Scopes, "oidc-scopes", []string{"openid", "profile", "email"}, "Scopes requested from the identity provider")
	f.BoolVar(&c.AllowSignups, "oidc-allow-signups", true, "Create a user at the first OIDC sign-in of an unknown email")
	f.StringVar(&c.UsernameField, "oidc-username-field", "preferred_username", "Claim that holds the username (else the email's local part)")
	f.StringVar(&c.EmailField, "oidc-email-field", "email", "Claim that holds the email")
	f.BoolVar(&c.IgnoreEmailVerified, "oidc-ignore-email-verified", false, "Accept emails whose email_verified claim is false")
	f.StringVar(&c.SignInText, "oidc-sign-in-text", "OpenID Connect", "Text of the login page's \"Sign in with ...\" button")
	f.StringVar(&c.IconURL, "oidc-icon-url", "", "Icon of the login page's OIDC button")
	f.StringVar(&c.GroupField, "oidc-group-field", "", "Claim that lists the user's groups (e.g. groups); turns group sync and --oidc-allowed-groups on. Empty: no group sync")
	f.StringVar(&c.GroupMappingJSON, "oidc-group-mapping", "{}", "JSON object of IdP group to Coder group name, e.g. {\"idp-devs\":\"developers\"}; unmapped groups keep their name")
	f.BoolVar(&c.GroupAutoCreate, "oidc-group-auto-create", false, "Create the Coder groups the group claim names that do not exist yet")
	f.StringVar(&c.GroupRegexFilter, "oidc-group-regex-filter", ".*", "Ignore the groups (after the mapping) whose name this regular expression does not match")
	f.StringSliceVar(&c.AllowedGroups, "oidc-allowed-groups", nil, "Groups allowed to sign in, comma separated, named after --oidc-group-mapping (as Coder); a user in none of them is refused. Empty allows any")
	f.StringVar(&c.UserRoleField, "oidc-user-role-field", "", "Claim that lists the user's roles; turns role sync on: every sign-in sets the user's roles from it. Empty: no role sync")
	f.StringVar(&c.UserRoleMappingJSON, "oidc-user-role-mapping", "{}", "JSON object of IdP role to a list of Coder roles (owner, template-admin), e.g. {\"idp-admins\":[\"template-admin\"]}; unmapped values that name a role are taken as is")
}
