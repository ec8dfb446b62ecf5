package coderd_test

import (
	"context"
	"reflect"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestWorkspaceListQueue: the workspace list reads the job queue once for
// all its pending builds; each one's queue position and size and the
// daemons that match it are what the workspace's own page says.
func TestWorkspaceListQueue(t *testing.T) {
	ctx := context.Background()
	_, admin, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{}, "queue")
	tpl := coderdtest.CreateTemplate(t, admin, daemon, "tpl", coderdtest.MinimalTemplate, nil)
	names := []string{"q1", "q2", "q3"}
	for _, name := range names { // no daemon takes them: all three stay pending
		if _, err := admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := admin.Workspaces(ctx, codersdk.WorkspaceFilter{Limit: 25})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Workspaces) != len(names) {
		t.Fatalf("listed %d workspaces, want %d", len(list.Workspaces), len(names))
	}
	for i, w := range list.Workspaces {
		job := w.LatestBuild.Job
		if job.Status != codersdk.ProvisionerJobPending || job.QueuePosition != i+1 || job.QueueSize != len(names) {
			t.Errorf("%s in the list: %s, position %d of %d; want pending, %d of %d", w.Name, job.Status, job.QueuePosition, job.QueueSize, i+1, len(names))
		}
		if job.MatchedProvisioners == nil || job.MatchedProvisioners.Count != 1 || job.MatchedProvisioners.Available != 1 {
			t.Errorf("%s in the list: matched provisioners %+v, want the one daemon, available", w.Name, job.MatchedProvisioners)
		}
		one, err := admin.WorkspaceByOwnerAndName(ctx, codersdk.Me, w.Name)
		if err != nil {
			t.Fatal(err)
		}
		alone := one.LatestBuild.Job
		if alone.QueuePosition != job.QueuePosition || alone.QueueSize != job.QueueSize || !reflect.DeepEqual(alone.MatchedProvisioners, job.MatchedProvisioners) {
			t.Errorf("%s: the list says position %d of %d, %+v; its own page %d of %d, %+v", w.Name,
				job.QueuePosition, job.QueueSize, job.MatchedProvisioners, alone.QueuePosition, alone.QueueSize, alone.MatchedProvisioners)
		}
	}
}
