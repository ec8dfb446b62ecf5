package coderd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"airgapcoder/coderd/database"
	"airgapcoder/coderd/workspacetags"
	"airgapcoder/codersdk"
)

// What a provisioner reports when it completes a job, turned into rows:
// a build's (or an import's) resources with their coder_metadata, agents,
// scripts and apps, and an import's parameters, variables and workspace
// tags.

// convertProvisionedResources turns a job's reported resources into rows
// (JobID and Transition left for the caller). Scripts without a
// LogSourceID, or sharing one, get a fresh one: it is how the agent names
// a script's output lines (POST /workspaceagents/me/logs).
func convertProvisionedResources(in []codersdk.ProvisionedResource) ([]database.Resource, error) {
	out := make([]database.Resource, 0, len(in))
	for _, r := range in {
		res := database.Resource{Type: r.Type, Name: r.Name, Hide: r.Hide, Icon: r.Icon, DailyCost: r.DailyCost}
		var err error
		if res.Metadata, err = marshalList(r.Metadata); err != nil {
			return nil, err
		}
		for _, a := range r.Agents {
			agent, err := convertProvisionedAgent(a)
			if err != nil {
				return nil, err
			}
			res.Agents = append(res.Agents, agent)
		}
		out = append(out, res)
	}
	return out, nil
}

func convertProvisionedAgent(a codersdk.ProvisionedAgent) (database.Agent, error) {
	agent := database.Agent{
		ID: a.ID, Name: a.Name, AuthToken: a.Token, OperatingSystem: a.OperatingSystem, Architecture: a.Architecture,
		Directory: a.Directory, Env: a.Env, ConnectionTimeoutSeconds: a.ConnectionTimeoutSeconds,
		TroubleshootingURL: a.TroubleshootingURL, MOTDFile: a.MOTDFile, Order: a.Order,
	}
	scripts := make([]codersdk.AgentScript, 0, len(a.Scripts))
	sources := map[string]bool{}
	for _, s := range a.Scripts {
		if uuid.Validate(s.LogSourceID) != nil || sources[s.LogSourceID] {
			s.LogSourceID = uuid.NewString()
		}
		sources[s.LogSourceID] = true
		scripts = append(scripts, s)
	}
	// Metadata keys name results (POST /workspaceagents/me/metadata): one
	// block per key, the first one wins.
	metadata := make([]codersdk.AgentMetadataDescription, 0, len(a.Metadata))
	keys := map[string]bool{}
	for _, m := range a.Metadata {
		if m.Key == "" {
			return agent, validation("resources.agents.metadata.key", fmt.Sprintf("agent %s: a metadata block has no key", a.Name))
		}
		if !keys[m.Key] {
			keys[m.Key] = true
			metadata = append(metadata, m)
		}
	}
	var err error
	if agent.Scripts, err = json.Marshal(scripts); err != nil {
		return agent, err
	}
	if agent.Metadata, err = json.Marshal(metadata); err != nil {
		return agent, err
	}
	if a.DisplayApps != nil {
		if agent.DisplayApps, err = json.Marshal(a.DisplayApps); err != nil {
			return agent, err
		}
	}
	for _, app := range a.Apps {
		dbApp := database.App{
			Slug: app.Slug, DisplayName: app.DisplayName, URL: app.URL, Port: app.Port, Command: app.Command, Icon: app.Icon,
			Subdomain: app.Subdomain, Share: app.Share, External: app.External, Group: app.Group, Order: app.Order,
			Hidden: app.Hidden, OpenIn: app.OpenIn, Tooltip: app.Tooltip, Health: codersdk.WorkspaceAppHealthDisabled,
		}
		if app.Healthcheck.Enabled() {
			dbApp.Health = codersdk.WorkspaceAppHealthInitializing
		}
		if app.Healthcheck != nil {
			if dbApp.Healthcheck, err = json.Marshal(app.Healthcheck); err != nil {
				return agent, err
			}
		}
		agent.Apps = append(agent.Apps, dbApp)
	}
	return agent, nil
}

// marshalList encodes a slice as a JSON array, nil as [].
func marshalList[T any](v []T) ([]byte, error) {
	if v == nil {
		v = []T{}
	}
	return json.Marshal(v)
}

// importOutcome is what an import reported, ready to store; failure, when
// set, is why the version cannot be used.
type importOutcome struct {
	parameters, variables, workspaceTags []byte
	failure                              string
}

// importResult checks and encodes what an import of version reported. Each
// variable's value is the one given at the version's creation, else the
// one the provisioner used, else its default (as Coder's
// provisionerdserver does); a required variable left without a value fails
// the import, and so does a workspace tag that does not parse.
func importResult(ctx context.Context, db *database.DB, versionID string, req codersdk.CompleteJobRequest) (importOutcome, error) {
	var out importOutcome
	v, err := db.TemplateVersionByID(ctx, versionID)
	if err != nil {
		return out, fmt.Errorf("load template version %s: %w", versionID, err)
	}
	var given []codersdk.VariableValue
	if err := unmarshalList(v.UserVariableValues, &given); err != nil {
		return out, fmt.Errorf("decode variable values of version %s: %w", v.ID, err)
	}
	givenByName := map[string]string{}
	for _, g := range given {
		givenByName[g.Name] = g.Value
	}
	vars := make([]codersdk.TemplateVersionVariable, 0, len(req.Variables))
	var missing []string
	for _, tv := range req.Variables {
		if g, ok := givenByName[tv.Name]; ok {
			tv.Value = g
		} else if tv.Value == "" {
			tv.Value = tv.DefaultValue
		}
		if tv.Required && tv.Value == "" {
			missing = append(missing, tv.Name)
		}
		vars = append(vars, tv)
	}
	if len(missing) > 0 {
		out.failure = fmt.Sprintf("required template variables need values: %s (give them with --variable when pushing the template)", strings.Join(missing, ", "))
		return out, nil
	}
	if err := workspacetags.Parse(req.WorkspaceTags); err != nil {
		out.failure = err.Error()
		return out, nil
	}
	if out.parameters, err = marshalList(req.Parameters); err != nil {
		return out, err
	}
	if out.variables, err = marshalList(vars); err != nil {
		return out, err
	}
	if out.workspaceTags, err = marshalList(req.WorkspaceTags); err != nil {
		return out, err
	}
	return out, nil
}
