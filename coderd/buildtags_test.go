package coderd_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// zoneTemplate is the import result of a template whose
// coder_workspace_tags puts each workspace on the daemons of the zone its
// "zone" parameter names, and tags every build with the "team" variable.
var zoneTemplate = codersdk.CompleteJobRequest{
	Parameters: []codersdk.TemplateVersionParameter{{
		Name: "zone", Type: codersdk.ParameterTypeString, DefaultValue: "eu",
		Options: []codersdk.TemplateVersionParameterOption{{Name: "EU", Value: "eu"}, {Name: "US", Value: "us"}},
	}},
	Variables: []codersdk.TemplateVersionVariable{{Name: "team", Type: "string", DefaultValue: "platform"}},
	WorkspaceTags: []codersdk.WorkspaceTagExpression{
		{Key: `"zone"`, Value: `data.coder_parameter.zone_selector.value`, References: map[string]string{"data.coder_parameter.zone_selector": "zone"}},
		{Key: `team`, Value: `var.team`},
	},
}

func TestWorkspaceTagsRouteBuilds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk"})
	admin, _ := d.CreateFirstUser(t)
	eu := d.NewDaemon(t, "eu", map[string]string{"zone": "eu", "team": "platform"})
	us := d.NewDaemon(t, "us", map[string]string{"zone": "us", "team": "platform"})
	// Tagged daemons take untagged jobs too: eu runs the import.
	tpl, _ := coderdtest.ImportTemplate(t, admin, eu, "zoned", codersdk.CreateTemplateVersionRequest{}, zoneTemplate)
	v, err := admin.TemplateVersion(ctx, tpl.ActiveVersionID)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.WorkspaceTags) != 2 || v.WorkspaceTags[0].References["data.coder_parameter.zone_selector"] != "zone" {
		t.Errorf("version's workspace tags: got %+v, want both entries with their references", v.WorkspaceTags)
	}

	// create makes a workspace in zone and checks its job's tags.
	create := func(name, zone string) codersdk.Workspace {
		t.Helper()
		w, err := admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{
			TemplateID: tpl.ID, Name: name, RichParameterValues: values("zone=" + zone),
		})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if got := w.LatestBuild.Job.Tags; got["zone"] != zone || got["team"] != "platform" || got[codersdk.TagScope] != codersdk.ProvisionerScopeOrg {
			t.Errorf("%s's job tags: got %v, want zone=%s team=platform scope=organization", name, got, zone)
		}
		return w
	}
	// Each build waits for its zone's daemon: the other one does not take it.
	inUS := create("in-us", "us")
	if j := eu.Acquire(t, 0); j != nil {
		t.Fatalf("eu daemon: got the job of %s, want none (it is tagged zone=us)", j.WorkspaceName)
	}
	if j := us.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`)}); j.WorkspaceID != inUS.ID {
		t.Errorf("us daemon: got the job of %s, want in-us", j.WorkspaceName)
	}
	inEU := create("in-eu", "eu")
	if j := us.Acquire(t, 0); j != nil {
		t.Fatalf("us daemon: got the job of %s, want none (it is tagged zone=eu)", j.WorkspaceName)
	}
	if j := eu.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`)}); j.WorkspaceID != inEU.ID {
		t.Errorf("eu daemon: got the job of %s, want in-eu", j.WorkspaceName)
	}

	// A later build follows its own values: in-us may not move (zone is
	// immutable), but a stop keeps its zone.
	if _, err := admin.CreateWorkspaceBuild(ctx, inUS.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err != nil {
		t.Fatal(err)
	}
	if j := eu.Acquire(t, 0); j != nil {
		t.Fatalf("eu daemon: got the stop of %s, want none", j.WorkspaceName)
	}
	if j := us.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`)}); j.WorkspaceID != inUS.ID || j.Transition != codersdk.WorkspaceTransitionStop {
		t.Errorf("us daemon: got %s of %s, want the stop of in-us", j.Transition, j.WorkspaceName)
	}
}

func TestWorkspaceTagsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk"})
	admin, _ := d.CreateFirstUser(t)
	daemon := d.NewDaemon(t, "any", map[string]string{"zone": "eu"})
	zone := codersdk.TemplateVersionParameter{Name: "zone", Type: codersdk.ParameterTypeString, DefaultValue: "eu"}
	refs := map[string]string{"data.coder_parameter.zone": "zone"}
	for i, tc := range []struct {
		name   string
		tag    codersdk.WorkspaceTagExpression
		detail string
	}{
		{"unknown parameter", codersdk.WorkspaceTagExpression{Key: `"os"`, Value: `data.coder_parameter.os.value`, References: refs}, "unknown reference data.coder_parameter.os.value"},
		{"unknown variable", codersdk.WorkspaceTagExpression{Key: `"team"`, Value: `var.team`}, "unknown reference var.team"},
		{"unsupported function", codersdk.WorkspaceTagExpression{Key: `"f"`, Value: `file("/etc/passwd")`}, "file"},
		{"not a string", codersdk.WorkspaceTagExpression{Key: `"l"`, Value: `[data.coder_parameter.zone.value]`, References: refs}, "want a string"},
		{"invalid tag", codersdk.WorkspaceTagExpression{Key: `"bad key"`, Value: `"x"`}, "bad key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl, _ := coderdtest.ImportTemplate(t, admin, daemon, fmt.Sprintf("tags%d", i), codersdk.CreateTemplateVersionRequest{},
				codersdk.CompleteJobRequest{Parameters: []codersdk.TemplateVersionParameter{zone}, WorkspaceTags: []codersdk.WorkspaceTagExpression{tc.tag}})
			_, err := admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: fmt.Sprintf("ws%d", i)})
			var e *codersdk.Error
			if !errors.As(err, &e) || e.StatusCode != http.StatusBadRequest {
				t.Fatalf("got %v, want a 400", err)
			}
			tagName := strings.Trim(tc.tag.Key, `"`)
			if !strings.Contains(e.Message, tagName) || !strings.Contains(e.Error(), tc.detail) {
				t.Errorf("got %q, want it to name tag %s and contain %q", e.Error(), tagName, tc.detail)
			}
			if j := daemon.Acquire(t, 0); j != nil {
				t.Errorf("got a queued job of %s, want none", j.WorkspaceName)
			}
		})
	}

	t.Run("unparsable tag fails the import", func(t *testing.T) {
		v := coderdtest.UploadVersionRequest(t, admin, coderdtest.MinimalTemplate, codersdk.CreateTemplateVersionRequest{})
		daemon.CompleteNext(t, codersdk.CompleteJobRequest{WorkspaceTags: []codersdk.WorkspaceTagExpression{{Key: `"k"`, Value: `"unterminated`}}})
		v, err := admin.TemplateVersion(ctx, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if v.Job.Status != codersdk.ProvisionerJobFailed || !strings.Contains(v.Job.Error, "workspace tag") {
			t.Errorf("import: got %s %q, want failed naming the workspace tag", v.Job.Status, v.Job.Error)
		}
	})
}
