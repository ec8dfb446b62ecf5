package cli_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestCLIUsersSuspendActivate: `coder users suspend|activate USER` print one
// line each and take effect at once; `users list` shows the status; a
// member, the owner on themselves and a missing USER are refused.
func TestCLIUsersSuspendActivate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	alice, aliceUser := d.CreateUser(t, owner, "alice")
	env := signedInEnv(t, owner)

	if got := mustRun(t, env, "users", "suspend", "alice"); got != "User alice is suspended.\n" {
		t.Errorf("coder users suspend alice: got %q, want one line saying she is suspended", got)
	}
	if _, err := alice.User(ctx, codersdk.Me); !codersdk.IsStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), "suspended") {
		t.Errorf("alice's session after suspend: got %v, want 401 saying she is suspended", err)
	}
	if got := mustRun(t, env, "users", "list"); !rowHas(got, "alice", "suspended") || !rowHas(got, "admin", "active") {
		t.Errorf("coder users list: got\n%s\nwant alice suspended and admin active", got)
	}

	// A user id works as well as a username.
	if got := mustRun(t, env, "users", "activate", aliceUser.ID); got != "User alice is active.\n" {
		t.Errorf("coder users activate ID: got %q, want one line saying alice is active", got)
	}
	if _, err := alice.User(ctx, codersdk.Me); err != nil {
		t.Errorf("alice's session after activate: %v", err)
	}

	memberEnv := signedInEnv(t, alice)
	checkRefusals(t, []refusal{
		{"member suspends the owner", memberEnv, []string{"users", "suspend", "admin"}, 1, "Forbidden"},
		{"owner suspends themselves", env, []string{"users", "suspend", "admin"}, 1, "You cannot suspend yourself"},
		{"unknown user", env, []string{"users", "activate", "nobody"}, 1, `User "nobody" not found`},
		{"no user", env, []string{"users", "suspend"}, 2, "needs 1 argument(s): USER"},
	})
	if u, err := owner.User(ctx, "admin"); err != nil || u.Status != codersdk.UserStatusActive {
		t.Errorf("the owner after the refusals: got %q, %v, want active", u.Status, err)
	}
}

// rowHas reports whether a table has a row starting with first that holds
// field.
func rowHas(table, first, field string) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == first && strings.Contains(" "+strings.Join(f, " ")+" ", " "+field+" ") {
			return true
		}
	}
	return false
}
