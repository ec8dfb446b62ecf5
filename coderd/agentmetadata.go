package coderd

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Agent metadata: a coder_agent's metadata blocks (descriptions, stored with
// the agent) and the latest result of each, which the agent posts as its
// scripts run (POST /workspaceagents/me/metadata) and users read with the
// agent (WorkspaceAgent.Metadata, with the result's age in seconds).
//
// Script output lines: a line the agent posts with a script's LogSourceID
// is stored with that script's display name as its source. Lines of
// run_on_start scripts (and lines without a source, from agents that send
// none) are also appended to the build's job logs, with
// codersdk.LogSourceAgent as source and as stage "Startup script"
// (codersdk.StageStartupScript) for the agent's converted startup_script
// and the script's display name for a coder_script — so `coder create`
// shows each script's output under its own heading.

// Caps of what an agent may store per metadata result, as Coder caps them
// (with a larger limit): longer values and errors are cut and the error
// says so.
const (
	maxAgentMetadataValue   = 10 << 10
	maxAgentMetadataError   = 10 << 10
	maxAgentMetadataPerPost = 128
)

// scriptStage is the job log stage of a script's output lines.
func scriptStage(s codersdk.AgentScript) string {
	if s.DisplayName == codersdk.ScriptStartupDisplayName || s.DisplayName == "" {
		return codersdk.StageStartupScript
	}
	return s.DisplayName
}

// agentMetadataDescriptions decodes an agent's metadata blocks.
func agentMetadataDescriptions(a database.Agent) ([]codersdk.AgentMetadataDescription, error) {
	out := []codersdk.AgentMetadataDescription{}
	if err := unmarshalList(a.Metadata, &out); err != nil {
		return nil, fmt.Errorf("decode metadata of agent %s: %w", a.ID, err)
	}
	return out, nil
}

// agentMetadata pairs an agent's metadata blocks with their latest
// results, sorted by order then key. A block with no result yet has a zero
// result.
func (api *API) agentMetadata(a database.Agent, results map[string]database.AgentMetadataResult) ([]codersdk.AgentMetadata, error) {
	descs, err := agentMetadataDescriptions(a)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(descs, func(i, j int) bool {
		if descs[i].Order != descs[j].Order {
			return descs[i].Order < descs[j].Order
		}
		return descs[i].Key < descs[j].Key
	})
	now := api.now()
	out := make([]codersdk.AgentMetadata, 0, len(descs))
	for _, d := range descs {
		m := codersdk.AgentMetadata{Description: d}
		if r, ok := results[d.Key]; ok {
			m.Result = codersdk.AgentMetadataResult{
				CollectedAt: r.CollectedAt, Age: max(int64(now.Sub(r.CollectedAt).Seconds()), 0), Value: r.Value, Error: r.Error,
			}
		}
		out = append(out, m)
	}
	return out, nil
}

func (api *API) postAgentMetadata(c *gin.Context) error {
	a := agentFrom(c)
	var req codersdk.PostAgentMetadataRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if len(req.Metadata) > maxAgentMetadataPerPost {
		return validation("metadata", fmt.Sprintf("at most %d results per request", maxAgentMetadataPerPost))
	}
	descs, err := agentMetadataDescriptions(a.Agent)
	if err != nil {
		return err
	}
	declared := map[string]bool{}
	for _, d := range descs {
		declared[d.Key] = true
	}
	now := api.now()
	results := make([]database.AgentMetadataResult, 0, len(req.Metadata))
	for _, m := range req.Metadata {
		if !declared[m.Key] {
			return validation("metadata.key", fmt.Sprintf("the agent declares no metadata block with key %q", m.Key))
		}
		r := database.AgentMetadataResult{AgentID: a.ID, Key: m.Key, CollectedAt: m.Result.CollectedAt.UTC()}
		if r.CollectedAt.IsZero() || r.CollectedAt.After(now) {
			r.CollectedAt = now
		}
		r.Value = sanitizeText(m.Result.Value)
		r.Error = sanitizeText(m.Result.Error)
		if len(r.Value) > maxAgentMetadataValue {
			r.Error = fmt.Sprintf("value of %d bytes exceeded %d bytes", len(r.Value), maxAgentMetadataValue)
			r.Value = truncateUTF8(r.Value, maxAgentMetadataValue)
		}
		if len(r.Error) > maxAgentMetadataError {
			r.Error = truncateUTF8(r.Error, maxAgentMetadataError)
		}
		results = append(results, r)
	}
	if err := api.db.UpsertAgentMetadata(c.Request.Context(), results); err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "Metadata stored"})
	return nil
}

// sanitizeText makes agent output storable as PostgreSQL text: valid
// UTF-8 without NUL bytes.
func sanitizeText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
