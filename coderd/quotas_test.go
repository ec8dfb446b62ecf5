package coderd_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestWorkspaceQuota builds workspaces of a template whose resource costs
// 10 credits a day (a coder_metadata daily_cost, as the provisioner
// reports it): unlimited with no allowance, then a budget of 15 admits one
// running workspace, refuses a second naming the numbers, and stopping the
// first frees the budget. The Everyone group's allowance counts too.
func TestWorkspaceQuota(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk"})
	owner, _ := d.CreateFirstUser(t)
	alice, aliceUser := d.CreateUser(t, owner, "alice")
	daemon := d.NewDaemon(t, "quota", nil)
	tpl, _ := coderdtest.ImportTemplate(t, owner, daemon, "paid", codersdk.CreateTemplateVersionRequest{}, codersdk.CompleteJobRequest{
		Resources: []codersdk.ProvisionedResource{{Type: "docker_container", Name: "dev", DailyCost: 10}},
	})
	quota := func(want codersdk.WorkspaceQuota) {
		t.Helper()
		got, err := alice.WorkspaceQuota(ctx, codersdk.Me)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("quota: got %+v, want %+v", got, want)
		}
	}
	build := func(name string, tr codersdk.WorkspaceTransition) error {
		t.Helper()
		w, err := alice.WorkspaceByOwnerAndName(ctx, codersdk.Me, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := alice.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: tr}); err != nil {
			return err
		}
		daemon.RunOne(t)
		return nil
	}

	// No allowance anywhere: quotas are off, two workspaces cost 20.
	for _, name := range []string{"a", "b"} {
		if _, err := alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: name}); err != nil {
			t.Fatalf("create %s without quotas: %v", name, err)
		}
		daemon.RunOne(t)
	}
	quota(codersdk.WorkspaceQuota{CreditsConsumed: 20})
	if err := build("b", codersdk.WorkspaceTransitionStop); err != nil {
		t.Fatal(err)
	}
	quota(codersdk.WorkspaceQuota{CreditsConsumed: 10})

	// A group of alice's with 15: "a" runs, "b" and a new one are refused.
	devs, err := owner.CreateGroup(ctx, "default", codersdk.CreateGroupRequest{Name: "devs"})
	if err != nil {
		t.Fatal(err)
	}
	allowance := 15
	devs, err = owner.PatchGroup(ctx, devs.ID, codersdk.PatchGroupRequest{AddUsers: []string{aliceUser.Username}, QuotaAllowance: &allowance})
	if err != nil {
		t.Fatal(err)
	}
	if devs.QuotaAllowance != 15 {
		t.Errorf("patched group: got quota_allowance %d, want 15", devs.QuotaAllowance)
	}
	quota(codersdk.WorkspaceQuota{CreditsConsumed: 10, Budget: 15, Enabled: true})
	want := "workspace quota exceeded: this build costs 10 credits a day, you use 10 of your budget 15"
	err = build("b", codersdk.WorkspaceTransitionStart)
	if !codersdk.IsStatus(err, http.StatusForbidden) || !strings.Contains(err.Error(), want) {
		t.Errorf("start b over the budget: got %v, want 403 %q", err, want)
	}
	_, err = alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "c"})
	if !codersdk.IsStatus(err, http.StatusForbidden) || !strings.Contains(err.Error(), want) {
		t.Errorf("create c over the budget: got %v, want 403 %q", err, want)
	}
	if _, err := alice.WorkspaceByOwnerAndName(ctx, codersdk.Me, "c"); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("refused workspace c: got %v, want 404 (not created)", err)
	}

	// Stopping "a" frees the budget for "b"; "a" is then refused.
	if err := build("a", codersdk.WorkspaceTransitionStop); err != nil {
		t.Fatal(err)
	}
	if err := build("b", codersdk.WorkspaceTransitionStart); err != nil {
		t.Fatalf("start b after stopping a: %v", err)
	}
	if err := build("a", codersdk.WorkspaceTransitionStart); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("start a while b runs: got %v, want 403", err)
	}

	// The Everyone group's allowance adds to every budget.
	org, err := owner.Organization(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	five := 5
	everyone, err := owner.PatchGroup(ctx, org.ID, codersdk.PatchGroupRequest{QuotaAllowance: &five})
	if err != nil {
		t.Fatal(err)
	}
	if everyone.QuotaAllowance != 5 {
		t.Errorf("Everyone: got quota_allowance %d, want 5", everyone.QuotaAllowance)
	}
	quota(codersdk.WorkspaceQuota{CreditsConsumed: 10, Budget: 20, Enabled: true})
	if err := build("a", codersdk.WorkspaceTransitionStart); err != nil {
		t.Fatalf("start a with a budget of 20: %v", err)
	}

	// A member sets no allowance.
	if _, err := alice.PatchGroup(ctx, devs.ID, codersdk.PatchGroupRequest{QuotaAllowance: &five}); !codersdk.IsStatus(err, http.StatusForbidden) && !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("member patching an allowance: got %v, want 403", err)
	}
}
