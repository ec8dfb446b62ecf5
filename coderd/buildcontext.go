package coderd

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// What a workspace build's provisioner job carries beyond the build itself:
// the owner as data "coder_workspace_owner" reads it, the template's
// variables, and the parameter values of this build and the previous one.
//
// The owner context follows Coder's provisionerdserver:
//   - full_name is the user's name ("" when unset), login_type "password"
//     (the only login this product has);
//   - groups is always empty: this product has no groups;
//   - roles are the user's role names, "member" included;
//   - session_token is an API key of the owner minted for each start build,
//     named after the workspace (workspaceSessionTokenName), valid for
//     workspaceSessionTokenLifetime and replacing the workspace's previous
//     one. Stop and delete builds get none and revoke it. Like Coder's, it
//     has the password login type, so `coder tokens list` does not list it;
//   - ssh_public_key and ssh_private_key are the owner's ed25519 pair,
//     generated on first need (GET /users/{user}/gitsshkey shows the
//     public half).

// workspaceSessionTokenLifetime is how long a build's session token works.
const workspaceSessionTokenLifetime = 24 * time.Hour

// workspaceSessionTokenName names the API key a workspace's builds get.
func workspaceSessionTokenName(w database.Workspace) string {
	return fmt.Sprintf("%s_%s_session_token", w.Name, w.ID)
}

// generateSSHKey makes an ed25519 key pair: an authorized_keys line and
// the private key in OpenSSH PEM.
func generateSSHKey() (public, private string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return "", "", err
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))), string(pem.EncodeToMemory(block)), nil
}

// ownerContext is the workspace owner as the build's provisioner sees it.
func (api *API) ownerContext(ctx context.Context, w database.Workspace, transition string) (codersdk.WorkspaceOwnerContext, error) {
	u, err := api.db.UserByID(ctx, w.OwnerID)
	if err != nil {
		return codersdk.WorkspaceOwnerContext{}, fmt.Errorf("load workspace owner: %w", err)
	}
	key, err := api.db.SSHKeyByUser(ctx, u.ID, generateSSHKey)
	if err != nil {
		return codersdk.WorkspaceOwnerContext{}, fmt.Errorf("load ssh key of %s: %w", u.Username, err)
	}
	var token string
	name := workspaceSessionTokenName(w)
	if transition == string(codersdk.WorkspaceTransitionStart) {
		id, secret := randomString(keyIDLength), randomString(keySecretLength)
		if _, err := api.db.ReplaceAPIKeyByName(ctx, database.APIKey{
			ID: id, HashedSecret: hashSecret(secret), UserID: u.ID, LoginType: loginTypePassword, TokenName: name,
			LifetimeSeconds: int64(workspaceSessionTokenLifetime.Seconds()), ExpiresAt: api.now().Add(workspaceSessionTokenLifetime),
		}); err != nil {
			return codersdk.WorkspaceOwnerContext{}, fmt.Errorf("mint the build's session token: %w", err)
		}
		token = id + "-" + secret
	} else if err := api.db.DeleteAPIKeyByName(ctx, u.ID, name); err != nil {
		return codersdk.WorkspaceOwnerContext{}, fmt.Errorf("revoke the workspace's session token: %w", err)
	}
	return codersdk.WorkspaceOwnerContext{
		FullName: u.Name, Email: u.Email, Groups: []string{}, Roles: roles(u), SessionToken: token,
		SSHPublicKey: key.PublicKey, SSHPrivateKey: key.PrivateKey, LoginType: loginTypePassword,
	}, nil
}

// buildJobContext fills what a build's job needs besides the build itself.
func (api *API) buildJobContext(ctx context.Context, out *codersdk.AcquiredJob, job database.ProvisionerJob, w database.Workspace, b database.WorkspaceBuild) error {
	v, err := api.db.TemplateVersionByID(ctx, b.TemplateVersionID)
	if err != nil {
		return fmt.Errorf("load template version: %w", err)
	}
	out.TemplateID = w.TemplateID
	out.TemplateVersionName = v.Name
	if out.VariableValues, err = buildVariableValues(v); err != nil {
		return err
	}
	var params []codersdk.WorkspaceBuildParameter
	if err := unmarshalList(b.RichParameterValues, &params); err != nil {
		return fmt.Errorf("decode parameters of build %s: %w", b.ID, err)
	}
	for _, p := range job.Input.EphemeralParameters {
		params = append(params, codersdk.WorkspaceBuildParameter{Name: p.Name, Value: p.Value})
	}
	out.RichParameterValues = params
	prev, err := api.db.WorkspaceBuildByNumber(ctx, w.ID, b.BuildNumber-1)
	switch {
	case errors.Is(err, database.ErrNotFound):
	case err != nil:
		return fmt.Errorf("load previous build: %w", err)
	default:
		if err := unmarshalList(prev.RichParameterValues, &out.PreviousParameterValues); err != nil {
			return fmt.Errorf("decode parameters of build %s: %w", prev.ID, err)
		}
	}
	if out.Owner, err = api.ownerContext(ctx, w, b.Transition); err != nil {
		return err
	}
	if out.ExternalAuthProviders, err = api.buildExternalAuthTokens(ctx, w, b); err != nil {
		return err
	}
	// Ephemeral values were for this hand-over only.
	if len(job.Input.EphemeralParameters) > 0 {
		if err := api.db.SetJobInput(ctx, job.ID, database.JobInput{WorkspaceBuildID: job.Input.WorkspaceBuildID}); err != nil {
			return fmt.Errorf("forget ephemeral parameter values: %w", err)
		}
	}
	return nil
}

// buildVariableValues are the values a version's builds pass as -var: those
// its import settled on, or the ones given at creation when the import
// reported no variables.
func buildVariableValues(v database.TemplateVersion) ([]codersdk.VariableValue, error) {
	var vars []codersdk.TemplateVersionVariable
	if err := unmarshalList(v.Variables, &vars); err != nil {
		return nil, fmt.Errorf("decode variables of version %s: %w", v.ID, err)
	}
	if len(vars) == 0 {
		var given []codersdk.VariableValue
		if err := unmarshalList(v.UserVariableValues, &given); err != nil {
			return nil, fmt.Errorf("decode variable values of version %s: %w", v.ID, err)
		}
		return given, nil
	}
	out := make([]codersdk.VariableValue, 0, len(vars))
	for _, tv := range vars {
		out = append(out, codersdk.VariableValue{Name: tv.Name, Value: tv.Value})
	}
	return out, nil
}

// unmarshalList decodes a JSON array column; empty means none.
func unmarshalList(b []byte, v any) error {
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}
