package coderd_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestDebugHealth: owners see every component's check, a failing one with
// its error, while /healthz stays one answer (503 naming the first
// failure); members may not read the report.
func TestDebugHealth(t *testing.T) {
	d := coderdtest.New(t, coderdtest.Options{HealthChecks: map[string]func(context.Context) error{
		"mirror":   func(context.Context) error { return errors.New("mirror /healthz: connection refused") },
		"launcher": func(context.Context) error { return nil },
	}})
	owner, _ := d.CreateFirstUser(t)
	ctx := context.Background()
	r, err := owner.DebugHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]codersdk.ComponentHealth{}
	for _, c := range r.Components {
		got[c.Name] = c
	}
	if r.Healthy || len(r.Components) != 3 || !got["database"].Healthy || !got["launcher"].Healthy ||
		got["mirror"].Healthy || !strings.Contains(got["mirror"].Error, "connection refused") {
		t.Errorf("report: %+v", r)
	}
	status, body := coderdtest.Do(t, http.MethodGet, d.URL.String()+"/healthz", "", nil, "")
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "mirror is not ready") {
		t.Errorf("/healthz: %s", coderdtest.String(status, body))
	}
	member, _ := d.CreateUser(t, owner, "member")
	if _, err := member.DebugHealth(ctx); !codersdk.IsStatus(err, http.StatusForbidden) && !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("a member's report: got %v, want 403", err)
	}
}
