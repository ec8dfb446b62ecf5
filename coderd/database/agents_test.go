package database_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
)

// agentSeed is a migrated database with an organization, a user and a
// template, in which workspaces with agents are made (addBuild).
type agentSeed struct {
	db                  *database.DB
	url                 string
	org, user, file, tv string
	tpl                 string
}

func newAgentSeed(t *testing.T) *agentSeed {
	t.Helper()
	ctx := context.Background()
	s := &agentSeed{url: coderdtest.NewDatabase(t), org: uuid.NewString(), user: uuid.NewString(), file: uuid.NewString()}
	s.db = coderdtest.OpenDatabase(t, s.url)
	seed(t, s.db.Pool(), ownerRows(s.org, s.user, s.file)...)
	job := s.job(t, database.JobTypeTemplateVersionImport)
	v, err := s.db.InsertTemplateVersion(ctx, database.TemplateVersion{OrganizationID: s.org, Name: "v1", JobID: job, CreatedBy: s.user})
	if err != nil {
		t.Fatal(err)
	}
	s.tv = v.ID
	tpl, err := s.db.InsertTemplate(ctx, database.Template{OrganizationID: s.org, Name: "tpl", DisplayName: "Template", ActiveVersionID: v.ID, CreatedBy: s.user})
	if err != nil {
		t.Fatal(err)
	}
	s.tpl = tpl.ID
	return s
}

func (s *agentSeed) job(t *testing.T, typ string) string {
	t.Helper()
	j, err := s.db.InsertJob(context.Background(), database.InsertJobParams{OrganizationID: s.org, InitiatorID: s.user, Type: typ,
		Tags: map[string]string{"scope": "organization"}, FileID: s.file})
	if err != nil {
		t.Fatal(err)
	}
	return j.ID
}

// addBuild gives workspace ws (created when "") a start build whose
// resource has one agent with token; it returns the workspace and the
// agent's id.
func (s *agentSeed) addBuild(t *testing.T, ws, name, token string) (string, string) {
	t.Helper()
	ctx := context.Background()
	job := s.job(t, database.JobTypeWorkspaceBuild)
	err := s.db.InTx(ctx, func(tx *database.DB) error {
		var err error
		if ws == "" {
			if ws, err = tx.InsertWorkspace(ctx, s.org, s.user, s.tpl, name); err != nil {
				return err
			}
		}
		build, err := tx.InsertWorkspaceBuild(ctx, database.InsertBuildParams{WorkspaceID: ws, TemplateVersionID: s.tv,
			Transition: "start", InitiatorID: s.user, JobID: job})
		if err != nil {
			return err
		}
		return tx.SetJobInput(ctx, job, database.JobInput{WorkspaceBuildID: build})
	})
	if err != nil {
		t.Fatalf("build workspace %s: %v", name, err)
	}
	if err := s.db.InsertResource(ctx, database.Resource{JobID: job, Transition: "start", Type: "docker_container", Name: "dev",
		Agents: []database.Agent{{Name: "main", AuthToken: token, OperatingSystem: "linux", Architecture: "amd64"}}}); err != nil {
		t.Fatal(err)
	}
	rs, err := s.db.ResourcesByJobIDs(ctx, []string{job})
	if err != nil || len(rs[job]) != 1 || len(rs[job][0].Agents) != 1 {
		t.Fatalf("resources of build job %s: got %+v (%v), want one agent", job, rs[job], err)
	}
	return ws, rs[job][0].Agents[0].ID
}

// TestAgentLivenessQueries: the queries a replica's agent heartbeat and a
// burst of agent connections run, for many agents at once, find what
// AgentByAuthToken finds for one and record what MarkAgentConnected (and
// Notify) record for one.
func TestAgentLivenessQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newAgentSeed(t)
	db := s.db
	tokenA, tokenB := uuid.NewString(), uuid.NewString()
	wsA, oldA := s.addBuild(t, "", "a", tokenA)
	_, newA := s.addBuild(t, wsA, "a", tokenA) // a new build: the token's new row
	_, agentB := s.addBuild(t, "", "b", tokenB)

	heads, err := db.NewestAgentsByAuthTokens(ctx, []string{tokenA, tokenB, uuid.NewString(), "not-a-uuid"})
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{tokenA: newA, tokenB: agentB} {
		one, err := db.AgentByAuthToken(ctx, token)
		if err != nil {
			t.Fatal(err)
		}
		if h := heads[token]; h.ID != want || h.ID != one.ID || h.BuildNumber != one.BuildNumber || h.AuthToken != token {
			t.Errorf("newest agent of token %s: got %+v, want %s (build %d), as AgentByAuthToken", token, h, want, one.BuildNumber)
		}
	}
	if len(heads) != 2 {
		t.Errorf("newest agents: got %d tokens, want 2 (unknown and invalid tokens left out)", len(heads))
	}
	if heads[tokenA].BuildNumber != 2 {
		t.Errorf("newest agent of a rebuilt workspace: got build %d, want 2", heads[tokenA].BuildNumber)
	}
	if got, err := db.NewestAgentsByAuthTokens(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("no tokens: got %v (%v), want none", got, err)
	}

	// A heartbeat of two agents: both connected at its time, on its
	// replica; a later one moves last_connected_at only.
	replica := uuid.NewString()
	first := time.Now().UTC().Truncate(time.Microsecond)
	if err := db.MarkAgentDisconnected(ctx, agentB, first.Add(-time.Second), ""); err != nil {
		t.Fatal(err)
	}
	if err := db.MarkAgentsConnected(ctx, []string{newA, agentB}, first, replica); err != nil {
		t.Fatal(err)
	}
	later := first.Add(10 * time.Second)
	if err := db.MarkAgentsConnected(ctx, []string{agentB, newA, newA}, later, replica); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{newA, agentB} {
		a, err := db.AgentByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if a.FirstConnectedAt == nil || !a.FirstConnectedAt.Equal(first) || a.LastConnectedAt == nil || !a.LastConnectedAt.Equal(later) ||
			a.DisconnectedAt != nil || a.ConnectedReplicaID != replica {
			t.Errorf("agent %s after two heartbeats: got first %v, last %v, disconnected %v, replica %q; want %v, %v, none, %s",
				id, a.FirstConnectedAt, a.LastConnectedAt, a.DisconnectedAt, a.ConnectedReplicaID, first, later, replica)
		}
	}
	if a, err := db.AgentByID(ctx, oldA); err != nil || a.LastConnectedAt != nil {
		t.Errorf("the old build's agent: got last connected %v (%v), want never", a.LastConnectedAt, err)
	}
	if err := db.MarkAgentsConnected(ctx, nil, later, replica); err != nil {
		t.Errorf("heartbeat of no agents: %v", err)
	}

	// Connections: recorded as a heartbeat, and each announced.
	announced := listen(t, s.url, database.ChannelAgentConnection)
	connected := later.Add(time.Second)
	if err := db.ConnectAgents(ctx, []string{oldA, agentB}, connected, ""); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 2 {
		select {
		case id := <-announced:
			got = append(got, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("announced connections: got %v, want %s and %s", got, oldA, agentB)
		}
	}
	if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values([]string{oldA, agentB}))) {
		t.Errorf("announced connections: got %v, want %s and %s", got, oldA, agentB)
	}
	for _, id := range []string{oldA, agentB} {
		a, err := db.AgentByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if a.LastConnectedAt == nil || !a.LastConnectedAt.Equal(connected) || a.FirstConnectedAt == nil || a.ConnectedReplicaID != "" {
			t.Errorf("agent %s connected: got first %v, last %v, replica %q; want last %v and no replica", id, a.FirstConnectedAt, a.LastConnectedAt, a.ConnectedReplicaID, connected)
		}
	}
	if err := db.ConnectAgents(ctx, nil, connected, ""); err != nil {
		t.Errorf("no connections: %v", err)
	}
}
