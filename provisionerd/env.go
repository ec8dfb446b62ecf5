package provisionerd

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"

	"airgapcoder/codersdk"
)

// environment is everything terraform and the coder/coder provider see:
// nothing from the daemon's own environment but PATH, and the host's
// settings (Options.Environment). The package
// documentation lists the variables. It holds the owner's session token,
// SSH private key and external auth tokens: never log it.
func (d *Daemon) environment(job *codersdk.AcquiredJob, dir, rc, cache string) map[string]string {
	env := map[string]string{"HOME": dir}
	maps.Copy(env, d.opts.Environment) // the host's settings, HOME among them
	maps.Copy(env, d.containmentEnv())
	maps.Copy(env, map[string]string{
		"PATH":                os.Getenv("PATH"),
		"TF_CLI_CONFIG_FILE":  rc,
		"TF_PLUGIN_CACHE_DIR": cache,
		"CHECKPOINT_DISABLE":  "1",
	})
	if d.opts.CACertFile != "" {
		env["SSL_CERT_FILE"] = d.opts.CACertFile
	}
	for k, v := range coderEnv(job, d.opts.AccessURL) {
		env[k] = v
	}
	if d.opts.AgentFallbackURL != "" {
		env["CODER_AGENT_FALLBACK_URL"] = d.opts.AgentFallbackURL
	}
	for k, v := range agentScriptEnv(d.agentCA, d.opts.AgentFallbackURL) {
		env[k] = v
	}
	return env
}

// coderEnv is the build context the provider reads: see the package
// documentation.
func coderEnv(job *codersdk.AcquiredJob, accessURL string) map[string]string {
	transition := string(job.Transition)
	if job.Type == codersdk.ProvisionerJobTypeTemplateVersionImport || transition == "" {
		transition = string(codersdk.WorkspaceTransitionStart)
	}
	if transition == string(codersdk.WorkspaceTransitionDelete) {
		transition = string(codersdk.WorkspaceTransitionStop)
	}
	groups := job.Owner.Groups
	if groups == nil {
		groups = []string{}
	}
	groupsJSON, _ := json.Marshal(groups)
	env := map[string]string{
		"CODER_AGENT_URL":                       accessURL,
		"CODER_WORKSPACE_TRANSITION":            transition,
		"CODER_WORKSPACE_NAME":                  job.WorkspaceName,
		"CODER_WORKSPACE_ID":                    job.WorkspaceID,
		"CODER_WORKSPACE_OWNER":                 job.WorkspaceOwner,
		"CODER_WORKSPACE_OWNER_ID":              job.WorkspaceOwnerID,
		"CODER_WORKSPACE_OWNER_NAME":            job.Owner.FullName,
		"CODER_WORKSPACE_OWNER_EMAIL":           job.Owner.Email,
		"CODER_WORKSPACE_OWNER_GROUPS":          string(groupsJSON),
		"CODER_WORKSPACE_OWNER_RBAC_ROLES":      rbacRolesJSON(job.Owner.Roles),
		"CODER_WORKSPACE_OWNER_SESSION_TOKEN":   job.Owner.SessionToken,
		"CODER_WORKSPACE_OWNER_SSH_PUBLIC_KEY":  job.Owner.SSHPublicKey,
		"CODER_WORKSPACE_OWNER_SSH_PRIVATE_KEY": job.Owner.SSHPrivateKey,
		"CODER_WORKSPACE_OWNER_LOGIN_TYPE":      job.Owner.LoginType,
		"CODER_WORKSPACE_TEMPLATE_ID":           job.TemplateID,
		"CODER_WORKSPACE_TEMPLATE_NAME":         job.TemplateName,
		"CODER_WORKSPACE_TEMPLATE_VERSION":      job.TemplateVersionName,
	}
	// With CODER_WORKSPACE_BUILD_ID set, data "coder_workspace" requires the
	// template's id, name and version; imports leave it unset.
	if job.Type == codersdk.ProvisionerJobTypeWorkspaceBuild {
		env["CODER_WORKSPACE_BUILD_ID"] = job.WorkspaceBuildID
	}
	for _, p := range job.PreviousParameterValues {
		env[parameterPreviousEnv(p.Name)] = p.Value
	}
	for _, p := range job.RichParameterValues {
		env[parameterEnv(p.Name)] = p.Value
	}
	maps.Copy(env, externalAuthTokenEnv(job.ExternalAuthProviders))
	return env
}

// parameterEnv is the variable data "coder_parameter" reads its value from:
// the provider's ParameterEnvironmentVariable (names may hold characters
// an environment variable name cannot, hence the hash).
func parameterEnv(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "CODER_PARAMETER_" + hex.EncodeToString(sum[:])
}

// parameterPreviousEnv is the provider's
// ParameterEnvironmentVariablePrevious: the previous build's value, against
// which monotonic validations check.
func parameterPreviousEnv(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "CODER_PARAMETER_PREVIOUS_" + hex.EncodeToString(sum[:])
}

// rbacRolesJSON encodes roles as data "coder_workspace_owner" parses
// rbac_roles: a JSON array of {"name", "org_id"}. Our roles are site-wide,
// so org_id is empty.
func rbacRolesJSON(roles []string) string {
	type role struct {
		Name  string `json:"name"`
		OrgID string `json:"org_id"`
	}
	out := make([]role, 0, len(roles))
	for _, r := range roles {
		out = append(out, role{Name: r})
	}
	b, _ := json.Marshal(out)
	return string(b)
}
