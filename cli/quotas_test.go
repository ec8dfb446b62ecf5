package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestCLIGroupsQuotaAllowance: `coder groups edit --quota-allowance` on a
// group and on Everyone, shown by `coder groups list` and summed into a
// member's budget; a negative allowance is refused naming the field.
func TestCLIGroupsQuotaAllowance(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	alice, _ := d.CreateUser(t, owner, "alice")
	env := signedInEnv(t, owner)

	mustRun(t, env, "groups", "create", "devs")
	if got := mustRun(t, env, "groups", "edit", "devs", "--add-users", "alice", "--quota-allowance", "15"); got != "Successfully patched group devs!\n" {
		t.Errorf("groups edit --quota-allowance: got %q", got)
	}
	if got := mustRun(t, env, "groups", "edit", "Everyone", "--quota-allowance", "5"); got != "Successfully patched group Everyone!\n" {
		t.Errorf("groups edit Everyone --quota-allowance: got %q", got)
	}
	if got := mustRun(t, env, "groups", "list"); !rowHas(got, "devs", "15") || !rowHas(got, "Everyone", "5") {
		t.Errorf("groups list: got\n%s\nwant devs with 15 and Everyone with 5", got)
	}
	q, err := alice.WorkspaceQuota(context.Background(), codersdk.Me)
	if err != nil {
		t.Fatal(err)
	}
	if want := (codersdk.WorkspaceQuota{Budget: 20, Enabled: true}); q != want {
		t.Errorf("alice's quota: got %+v, want %+v", q, want)
	}
	_, stderr, code := run(t, env, "groups", "edit", "devs", "--quota-allowance", "-1")
	if code == 0 || !strings.Contains(stderr, "quota_allowance") {
		t.Errorf("groups edit --quota-allowance -1: got exit %d, stderr %q; want a failure naming quota_allowance", code, stderr)
	}
	// Everyone takes nothing but an allowance.
	if _, stderr, code := run(t, env, "groups", "edit", "Everyone", "--quota-allowance", "1", "--name", "all"); code == 0 || !strings.Contains(stderr, "Everyone") {
		t.Errorf("renaming Everyone with an allowance: got exit %d, stderr %q; want refused", code, stderr)
	}
}

// quotaTemplate costs 10 credits a day: a coder_metadata daily_cost, as
// Coder's templates price their resources.
const quotaTemplate = `terraform {
  required_providers {
    coder = {
      source = "coder/coder"
    }
  }
}

data "coder_workspace" "me" {}

resource "terraform_data" "vm" {
  count = data.coder_workspace.me.start_count
}

resource "coder_metadata" "vm" {
  count       = data.coder_workspace.me.start_count
  resource_id = terraform_data.vm[count.index].id
  daily_cost  = 10
}
`

// TestCLIQuotaRealBuild is issue 35's "a quota refusal names the limit",
// through the built binary, real terraform and the official provider: with
// the Everyone group's allowance at 15, a second workspace of the 10-credit
// template is refused naming 10, 10 and 15; stopping the first lets it
// start.
func TestCLIQuotaRealBuild(t *testing.T) {
	t.Parallel()
	d := coderdtest.NewWithProvisioners(t, coderBinary(t))
	owner, _ := d.CreateFirstUser(t)
	env := signedInEnv(t, owner)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(quotaTemplate), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, env, "templates", "create", "paid", "--directory", dir, "-y")
	mustRun(t, env, "groups", "edit", "Everyone", "--quota-allowance", "15")
	mustRun(t, env, "create", "one", "--template", "paid", "-y")

	_, stderr, code := run(t, env, "create", "two", "--template", "paid", "-y")
	want := "workspace quota exceeded: this build costs 10 credits a day, you use 10 of your budget 15"
	if code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("create over the budget: got exit %d, stderr %q; want a failure with %q", code, stderr, want)
	}
	mustRun(t, env, "stop", "one", "-y")
	mustRun(t, env, "create", "two", "--template", "paid", "-y")
	t.Cleanup(func() { _, _, _ = run(t, env, "stop", "two", "-y") })
}
