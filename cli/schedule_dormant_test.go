package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestCLIDormant runs the built binary: alice marks her stopped workspace
// dormant, sees when it is deleted (coder dormant list, coder list, coder
// show), is refused a start with a message that names `coder dormant off`,
// and makes it active again.
func TestCLIDormant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newAdminCLI(t, coderdtest.Options{})
	a.withWorkspace(t)
	mustRun(t, a.ownerEnv, "templates", "edit", "tpl", "--dormancy-auto-deletion", "7d")
	if _, err := a.alice.CreateWorkspaceBuild(ctx, a.ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err != nil {
		t.Fatalf("stop dev: %v", err)
	}
	a.daemon.RunOne(t)

	if out := mustRun(t, a.aliceEnv, "dormant", "off", "dev"); out != "Workspace dev is not dormant.\n" {
		t.Errorf("coder dormant off on an active workspace: got %q", out)
	}
	out := mustRun(t, a.aliceEnv, "dormant", "on", "dev")
	if !strings.HasPrefix(out, "Workspace dev is dormant; it is deleted at ") || !strings.Contains(out, "`coder dormant off dev`") {
		t.Errorf("coder dormant on: got %q, want the deletion time and how to undo it", out)
	}

	var rows []struct {
		Workspace  string     `json:"workspace"`
		DormantAt  time.Time  `json:"dormant_at"`
		DeletingAt *time.Time `json:"deleting_at"`
	}
	decodeJSON(t, "coder dormant list", mustRun(t, a.aliceEnv, "dormant", "list", "-o", "json"), &rows)
	if len(rows) != 1 || rows[0].Workspace != "alice/dev" || rows[0].DeletingAt == nil || rows[0].DeletingAt.Sub(rows[0].DormantAt) != 7*24*time.Hour {
		t.Fatalf("coder dormant list -o json: got %+v, want alice/dev deleted 7 days after it turned dormant", rows)
	}
	if table := mustRun(t, a.aliceEnv, "dormant", "list"); !strings.Contains(table, "DELETING AT") || !strings.Contains(table, "alice/dev") || !strings.Contains(table, "(in 16") {
		t.Errorf("coder dormant list:\n%s", table)
	}
	ws := workspaces(t, a.aliceEnv)
	if len(ws) != 1 || ws[0].DormantAt == nil || ws[0].DeletingAt == nil || !ws[0].DeletingAt.Equal(*rows[0].DeletingAt) {
		t.Errorf("coder list -o json: got %+v, want dev with dormant_at and deleting_at", ws)
	}
	if table := mustRun(t, a.aliceEnv, "list"); !strings.Contains(table, "dormant, deleted ") {
		t.Errorf("coder list shows no deletion time:\n%s", table)
	}
	if show := mustRun(t, a.aliceEnv, "show", "dev"); !strings.Contains(show, "Dormant: since ") || !strings.Contains(show, "; deleted at ") {
		t.Errorf("coder show shows no dormancy:\n%s", show)
	}

	_, stderr, code := run(t, a.aliceEnv, "start", "dev", "-y")
	if code != 1 || !strings.Contains(stderr, "is dormant") || !strings.Contains(stderr, "`coder dormant off dev`") {
		t.Errorf("coder start of a dormant workspace: exit %d, stderr %q; want 1 and how to make it active", code, stderr)
	}
	if out := mustRun(t, a.aliceEnv, "dormant", "activate", "dev"); out != "Workspace dev is active again; start it with `coder start dev`.\n" {
		t.Errorf("coder dormant activate: got %q", out)
	}
	if out := mustRun(t, a.aliceEnv, "dormant", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("coder dormant list -o json after activating: got %q, want []", out)
	}
	if w := showWorkspace(t, a.aliceEnv, "dev"); w.DormantAt != nil || w.DeletingAt != nil {
		t.Errorf("after coder dormant off: dormant_at %v, deleting_at %v; want none", w.DormantAt, w.DeletingAt)
	}

	checkRefusals(t, []refusal{
		{"no name", a.aliceEnv, []string{"dormant", "off"}, 2, "NAME"},
		{"no such workspace", a.aliceEnv, []string{"dormant", "on", "nope"}, 1, "nope"},
		{"stray argument", a.aliceEnv, []string{"dormant", "list", "extra"}, 2, "takes no arguments"},
	})
}
