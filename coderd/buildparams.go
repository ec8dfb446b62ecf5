package coderd

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"airgapcoder/coderd/database"
	"airgapcoder/coderd/parameters"
	"airgapcoder/coderd/workspacetags"
	"airgapcoder/codersdk"
)

// A new build's parameter values and provisioner tags are settled when it
// is requested, before any job is queued, so that every refusal is a 400
// the user sees at once (not a failed terraform run):
//
//   - parameters.Resolve picks and validates each parameter's value (the
//     provider's rules plus required, immutable and unknown names);
//   - workspacetags.Evaluate turns the version's coder_workspace_tags into
//     tags with those values; the job carries the version's import tags
//     overlaid with them, then scope and owner as for any job
//     (provisionertags.go).

// preparedBuild is what a new build needs besides its transition.
type preparedBuild struct {
	version database.TemplateVersion
	fileID  string // the version's template tar
	values  parameters.Result
	tags    map[string]string
}

// prepareBuild resolves a build of version v for a workspace of ownerID.
// previous are the stored values of the workspace's latest build (nil for
// its first), requested those of the request.
func (api *API) prepareBuild(ctx context.Context, v database.TemplateVersion, ownerID string, previous, requested []codersdk.WorkspaceBuildParameter) (preparedBuild, error) {
	var declared []codersdk.TemplateVersionParameter
	if err := unmarshalList(v.Parameters, &declared); err != nil {
		return preparedBuild{}, fmt.Errorf("decode parameters of version %s: %w", v.ID, err)
	}
	res, err := parameters.Resolve(parameters.Input{Declared: declared, Previous: previous, Requested: requested})
	var perrs parameters.Errors
	if errors.As(err, &perrs) {
		return preparedBuild{}, parameterError(perrs)
	}
	if err != nil {
		return preparedBuild{}, err
	}
	versionJob, err := api.db.JobByID(ctx, v.JobID)
	if err != nil {
		return preparedBuild{}, err
	}
	tags, err := buildJobTags(v, versionJob, ownerID, res.Values)
	if err != nil {
		return preparedBuild{}, err
	}
	return preparedBuild{version: v, fileID: versionJob.FileID, values: res, tags: tags}, nil
}

// parameterError is the 400 for refused parameter values: the message names
// the first parameter and its rule, validations list every one.
func parameterError(errs parameters.Errors) *apiError {
	first := errs[0]
	msg := fmt.Sprintf("Parameter %q fails its %s rule: %s", first.Parameter, first.Rule, first.Detail)
	if len(errs) > 1 {
		msg += fmt.Sprintf(" (and %d more invalid parameter(s))", len(errs)-1)
	}
	e := badRequest("%s", msg)
	for _, pe := range errs {
		e.Validations = append(e.Validations, codersdk.ValidationError{Field: pe.Parameter, Detail: fmt.Sprintf("%s rule: %s", pe.Rule, pe.Detail)})
	}
	return e
}

// buildJobTags derives a build's job tags: its version's import tags
// overlaid with the version's workspace tags evaluated for values, then
// scope and owner (scope=user builds belong to the workspace owner).
func buildJobTags(v database.TemplateVersion, versionJob database.ProvisionerJob, ownerID string, values []codersdk.WorkspaceBuildParameter) (map[string]string, error) {
	tags := maps.Clone(versionJob.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	var exprs []codersdk.WorkspaceTagExpression
	if err := unmarshalList(v.WorkspaceTags, &exprs); err != nil {
		return nil, fmt.Errorf("decode workspace tags of version %s: %w", v.ID, err)
	}
	if len(exprs) > 0 {
		var vars []codersdk.TemplateVersionVariable
		if err := unmarshalList(v.Variables, &vars); err != nil {
			return nil, fmt.Errorf("decode variables of version %s: %w", v.ID, err)
		}
		in := workspacetags.Input{Parameters: map[string]string{}, Variables: map[string]workspacetags.Variable{}}
		for _, p := range values {
			in.Parameters[p.Name] = p.Value
		}
		for _, tv := range vars {
			value := tv.Value
			if value == "" {
				value = tv.DefaultValue
			}
			in.Variables[tv.Name] = workspacetags.Variable{Value: value, Type: tv.Type}
		}
		evaluated, err := workspacetags.Evaluate(exprs, in)
		var te *workspacetags.Error
		if errors.As(err, &te) {
			e := badRequest("Workspace tag %q of template version %s cannot be evaluated: %s", te.Tag, v.Name, te.Detail)
			e.Validations = []codersdk.ValidationError{{Field: "workspace_tags." + te.Tag, Detail: te.Detail}}
			return nil, e
		}
		if err != nil {
			return nil, err
		}
		maps.Copy(tags, evaluated)
	}
	out, err := normalizeTags(tags, ownerID)
	if err != nil {
		e := badRequest("The workspace tags of template version %s give the build invalid provisioner tags: %v", v.Name, err)
		e.Validations = []codersdk.ValidationError{{Field: "workspace_tags", Detail: err.Error()}}
		return nil, e
	}
	return out, nil
}
