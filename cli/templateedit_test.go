package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestCLITemplatesEdit runs the built binary: an owner sets a template's
// schedule defaults with Coder's flags, a member is refused, bad values
// are named.
func TestCLITemplatesEdit(t *testing.T) {
	t.Parallel()
	a := newAdminCLI(t, coderdtest.Options{})
	a.tpl = coderdtest.CreateTemplate(t, a.owner, a.daemon, "tpl", coderdtest.MinimalTemplate, nil)

	got := mustRun(t, a.ownerEnv, "templates", "edit", "tpl", "--default-ttl", "8h", "--activity-bump", "1h",
		"--dormancy-threshold", "720h", "--dormancy-auto-deletion", "7d")
	want := "Updated template tpl: default TTL 8h, activity bump 1h, dormancy threshold 720h, dormancy auto-deletion 168h, max TTL off.\n"
	if got != want {
		t.Errorf("coder templates edit: got %q, want %q", got, want)
	}
	got = mustRun(t, a.ownerEnv, "templates", "edit", "tpl", "--activity-bump", "0")
	if !strings.Contains(got, "default TTL 8h, activity bump off,") {
		t.Errorf("coder templates edit --activity-bump 0: got %q, want the bump off and the rest kept", got)
	}
	got = mustRun(t, a.ownerEnv, "templates", "edit", "tpl", "--max-ttl", "12h")
	if !strings.HasSuffix(got, ", max TTL 12h.\n") {
		t.Errorf("coder templates edit --max-ttl 12h: got %q, want the max TTL 12h", got)
	}
	tpl, err := a.owner.Template(context.Background(), a.tpl.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantFields := codersdk.TemplateScheduleFields{
		DefaultTTLMillis: (8 * time.Hour).Milliseconds(), TimeTilDormantMillis: (720 * time.Hour).Milliseconds(),
		TimeTilDormantAutoDeleteMillis: (168 * time.Hour).Milliseconds(), MaxTTLMillis: (12 * time.Hour).Milliseconds(),
	}
	if tpl.TemplateScheduleFields != wantFields {
		t.Errorf("template: got %+v, want %+v", tpl.TemplateScheduleFields, wantFields)
	}

	for _, tc := range []struct {
		name   string
		env    []string
		args   []string
		stderr string
	}{
		{"nothing to change", a.ownerEnv, []string{"templates", "edit", "tpl"}, "nothing to change"},
		{"bad duration", a.ownerEnv, []string{"templates", "edit", "tpl", "--default-ttl", "soon"}, "--default-ttl"},
		{"below the minimum", a.ownerEnv, []string{"templates", "edit", "tpl", "--default-ttl", "10s"}, "default_ttl_ms"},
		{"no such template", a.ownerEnv, []string{"templates", "edit", "nope", "--default-ttl", "1h"}, `no template "nope"`},
		{"default above the maximum", a.ownerEnv, []string{"templates", "edit", "tpl", "--default-ttl", "13h"}, "max_ttl_ms"},
		{"bad max TTL", a.ownerEnv, []string{"templates", "edit", "tpl", "--max-ttl", "forever"}, "--max-ttl"},
		{"member", a.aliceEnv, []string{"templates", "edit", "tpl", "--default-ttl", "1h"}, "edit template tpl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := run(t, tc.env, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("coder %s: got exit %d, stderr %q, want a failure naming %q", strings.Join(tc.args, " "), code, stderr, tc.stderr)
			}
		})
	}
}
