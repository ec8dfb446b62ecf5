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

func int32p(v int32) *int32 { return &v }

// richParameters is a template's coder_parameter blocks, one per rule.
var richParameters = []codersdk.TemplateVersionParameter{
	{Name: "region", Type: codersdk.ParameterTypeString, DefaultValue: "eu", Order: 1,
		Options: []codersdk.TemplateVersionParameterOption{{Name: "Europe", Value: "eu"}, {Name: "United States", Value: "us"}}},
	{Name: "login", Type: codersdk.ParameterTypeString, DefaultValue: "abc", Mutable: true, Order: 2,
		ValidationRegex: "^[a-z]+$", ValidationError: "lowercase letters only"},
	{Name: "prefix", Type: codersdk.ParameterTypeString, DefaultValue: "x1", Mutable: true, Order: 2, ValidationRegex: "^x"},
	{Name: "cpu", Type: codersdk.ParameterTypeNumber, DefaultValue: "2", Mutable: true, Order: 3, ValidationMin: int32p(1), ValidationMax: int32p(8)},
	{Name: "mem", Type: codersdk.ParameterTypeNumber, DefaultValue: "4", Mutable: true, Order: 3, ValidationMin: int32p(1), ValidationMax: int32p(64),
		ValidationError: "memory must be between {min} and {max} GiB, got {value}"},
	{Name: "disk", Type: codersdk.ParameterTypeNumber, DefaultValue: "10", Mutable: true, Order: 4, ValidationMonotonic: "increasing"},
	{Name: "quota", Type: codersdk.ParameterTypeNumber, DefaultValue: "100", Mutable: true, Order: 4, ValidationMonotonic: "decreasing"},
	{Name: "replicas", Type: codersdk.ParameterTypeNumber, DefaultValue: "1", Mutable: true, Order: 5},
	{Name: "gpu", Type: codersdk.ParameterTypeBool, DefaultValue: "false", Mutable: true, Order: 5},
	{Name: "labels", Type: codersdk.ParameterTypeListString, DefaultValue: "[]", Mutable: true, Order: 6},
	{Name: "langs", Type: codersdk.ParameterTypeListString, FormType: "multi-select", DefaultValue: `["go"]`, Mutable: true, Order: 6,
		Options: []codersdk.TemplateVersionParameterOption{{Name: "Go", Value: "go"}, {Name: "Rust", Value: "rust"}, {Name: "Python", Value: "python"}}},
	{Name: "token", Type: codersdk.ParameterTypeString, Required: true, Mutable: true, Order: 7},
	{Name: "debug", Type: codersdk.ParameterTypeString, DefaultValue: "off", Mutable: true, Ephemeral: true, Order: 8},
}

// paramHarness is a deployment with a template declaring richParameters.
type paramHarness struct {
	d        *coderdtest.Deployment
	admin    *codersdk.Client
	member   *codersdk.Client
	daemon   *coderdtest.Daemon
	template codersdk.Template
}

func newParamHarness(t *testing.T) *paramHarness {
	t.Helper()
	h := &paramHarness{d: coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk"})}
	h.admin, _ = h.d.CreateFirstUser(t)
	h.member, _ = h.d.CreateUser(t, h.admin, "alice")
	h.daemon = h.d.NewDaemon(t, "params", nil)
	h.template, _ = coderdtest.ImportTemplate(t, h.admin, h.daemon, "params", codersdk.CreateTemplateVersionRequest{},
		codersdk.CompleteJobRequest{Parameters: richParameters})
	return h
}

// values turns name=value pairs into build parameters.
func values(pairs ...string) []codersdk.WorkspaceBuildParameter {
	out := []codersdk.WorkspaceBuildParameter{}
	for _, p := range pairs {
		name, value, _ := strings.Cut(p, "=")
		out = append(out, codersdk.WorkspaceBuildParameter{Name: name, Value: value})
	}
	return out
}

// valueOf returns the value of name in ps and whether it is there.
func valueOf(ps []codersdk.WorkspaceBuildParameter, name string) (string, bool) {
	for _, p := range ps {
		if p.Name == name {
			return p.Value, true
		}
	}
	return "", false
}

// wantRefused checks err is a 400 whose message names parameter and rule,
// with one validation for parameter whose detail contains detail.
func wantRefused(t *testing.T, err error, parameter, rule, detail string) {
	t.Helper()
	var e *codersdk.Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusBadRequest {
		t.Fatalf("got %v, want a 400", err)
	}
	if !strings.Contains(e.Message, `"`+parameter+`"`) || !strings.Contains(e.Message, rule) {
		t.Errorf("got message %q, want it to name parameter %q and rule %q", e.Message, parameter, rule)
	}
	if len(e.Validations) != 1 || e.Validations[0].Field != parameter || !strings.Contains(e.Validations[0].Detail, detail) {
		t.Errorf("got validations %+v, want one for %q whose detail contains %q", e.Validations, parameter, detail)
	}
}

// wantNoJob checks nothing was queued for the daemon.
func (h *paramHarness) wantNoJob(t *testing.T) {
	t.Helper()
	if j := h.daemon.Acquire(t, 0); j != nil {
		t.Fatalf("got a queued %s job (workspace %q), want none", j.Type, j.WorkspaceName)
	}
}

func TestRichParameterValidation(t *testing.T) {
	t.Parallel()
	h := newParamHarness(t)
	ctx := context.Background()
	for i, tc := range []struct {
		name   string
		values []codersdk.WorkspaceBuildParameter
		// param, rule and detail describe the refusal; param "" means the
		// values are accepted.
		param, rule, detail string
	}{
		{name: "required missing", values: values(), param: "token", rule: "required", detail: "is required"},
		{name: "required empty", values: values("token="), param: "token", rule: "required", detail: "must not be empty"},
		{name: "unknown name", values: values("token=t", "nope=1"), param: "nope", rule: "unknown", detail: `declares no parameter "nope"`},
		{name: "duplicate name", values: values("token=t", "cpu=2", "cpu=3"), param: "cpu", rule: "duplicate", detail: "more than once"},
		{name: "not an option", values: values("token=t", "region=mars"), param: "region", rule: "option", detail: `"mars" is not one of the options ("eu", "us")`},
		{name: "regex with the template's error", values: values("token=t", "login=ABC"), param: "login", rule: "regex",
			detail: `lowercase letters only (value "ABC" does not match "^[a-z]+$")`},
		{name: "regex without an error", values: values("token=t", "prefix=y1"), param: "prefix", rule: "regex", detail: `does not match the regex "^x"`},
		{name: "above max", values: values("token=t", "cpu=9"), param: "cpu", rule: "max", detail: "value 9 is more than the maximum 8"},
		{name: "below min", values: values("token=t", "cpu=0"), param: "cpu", rule: "min", detail: "value 0 is less than the minimum 1"},
		{name: "not an integer under validation", values: values("token=t", "cpu=1.5"), param: "cpu", rule: "type", detail: `value "1.5" is not a number`},
		{name: "max with the template's error", values: values("token=t", "mem=100"), param: "mem", rule: "max",
			detail: "memory must be between 1 and 64 GiB, got 100"},
		{name: "min with the template's error", values: values("token=t", "mem=0"), param: "mem", rule: "min",
			detail: "memory must be between 1 and 64 GiB, got 0"},
		{name: "not a number", values: values("token=t", "replicas=two"), param: "replicas", rule: "type", detail: `"two" is not a number`},
		{name: "not a bool", values: values("token=t", "gpu=yes"), param: "gpu", rule: "type", detail: `"true" or "false"`},
		{name: "bool spelled otherwise", values: values("token=t", "gpu=True"), param: "gpu", rule: "type", detail: `"true" or "false"`},
		{name: "not a list", values: values("token=t", "labels=a,b"), param: "labels", rule: "type", detail: "not a valid list of strings"},
		{name: "list of numbers", values: values("token=t", "labels=[1,2]"), param: "labels", rule: "type", detail: "not a valid list of strings"},
		{name: "list element not an option", values: values("token=t", `langs=["go","cobol"]`), param: "langs", rule: "option", detail: `"cobol"`},

		{name: "defaults", values: values("token=t")},
		{name: "every rule met", values: values("token=t", "region=us", "login=xyz", "prefix=xx", "cpu=8", "mem=64", "disk=1",
			"quota=1", "replicas=2.5", "gpu=true", `labels=["a","b"]`, `langs=["rust","python"]`, "debug=on")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("ws-%d", i)
			w, err := h.member.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: h.template.ID, Name: name, RichParameterValues: tc.values})
			if tc.param != "" {
				wantRefused(t, err, tc.param, tc.rule, tc.detail)
				h.wantNoJob(t)
				if _, err := h.member.WorkspaceByOwnerAndName(ctx, codersdk.Me, name); !codersdk.IsStatus(err, http.StatusNotFound) {
					t.Errorf("workspace after a refused create: got %v, want 404", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("create with %v: got %v, want it accepted", tc.values, err)
			}
			j := h.daemon.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`)})
			if j.WorkspaceID != w.ID {
				t.Fatalf("got the job of workspace %s, want %s", j.WorkspaceName, w.Name)
			}
			// The job carries every parameter: requested or default.
			for _, p := range richParameters {
				want := p.DefaultValue
				if v, ok := valueOf(tc.values, p.Name); ok {
					want = v
				}
				if got, ok := valueOf(j.RichParameterValues, p.Name); !ok || got != want {
					t.Errorf("job's %s: got %q (present %v), want %q", p.Name, got, ok, want)
				}
			}
			// The build shows what it stored: every value but ephemeral ones.
			b, err := h.member.WorkspaceBuild(ctx, w.LatestBuild.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(b.RichParameterValues), len(richParameters)-1; got != want {
				t.Errorf("build's parameters: got %d (%v), want %d", got, b.RichParameterValues, want)
			}
			if v, ok := valueOf(b.RichParameterValues, "debug"); ok {
				t.Errorf("build's parameters: got ephemeral debug=%q stored, want it absent", v)
			}
		})
	}
}

func TestRichParameterUpdates(t *testing.T) {
	t.Parallel()
	h := newParamHarness(t)
	ctx := context.Background()
	w, err := h.member.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{
		TemplateID: h.template.ID, Name: "dev", RichParameterValues: values("token=t1", "region=us", "disk=20", "quota=50", "cpu=4", "debug=on"),
	})
	if err != nil {
		t.Fatal(err)
	}
	first := h.daemon.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`)})
	if got, _ := valueOf(first.RichParameterValues, "debug"); got != "on" {
		t.Errorf("first build's ephemeral debug: got %q, want on", got)
	}
	if len(first.PreviousParameterValues) != 0 {
		t.Errorf("first build's previous values: got %v, want none", first.PreviousParameterValues)
	}
	// Handed over, the ephemeral value is gone from the database too.
	if j, err := h.d.DB.JobByID(ctx, first.JobID); err != nil || len(j.Input.EphemeralParameters) != 0 {
		t.Errorf("job input after hand-over: got %+v (%v), want no ephemeral values", j.Input, err)
	}

	// build queues a start build with vals and runs it, returning the job.
	build := func(t *testing.T, vals []codersdk.WorkspaceBuildParameter) *codersdk.AcquiredJob {
		t.Helper()
		if _, err := h.member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart, RichParameterValues: vals}); err != nil {
			t.Fatalf("build with %v: %v", vals, err)
		}
		return h.daemon.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`)})
	}
	refused := func(t *testing.T, vals []codersdk.WorkspaceBuildParameter, param, rule, detail string) {
		t.Helper()
		_, err := h.member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart, RichParameterValues: vals})
		wantRefused(t, err, param, rule, detail)
		h.wantNoJob(t)
	}

	t.Run("previous values carried, ephemeral not", func(t *testing.T) {
		j := build(t, values("mem=8"))
		for name, want := range map[string]string{"region": "us", "disk": "20", "quota": "50", "cpu": "4", "token": "t1", "mem": "8", "debug": "off", "gpu": "false"} {
			if got, _ := valueOf(j.RichParameterValues, name); got != want {
				t.Errorf("%s: got %q, want %q", name, got, want)
			}
		}
		for name, want := range map[string]string{"region": "us", "cpu": "4", "mem": "4"} {
			if got, _ := valueOf(j.PreviousParameterValues, name); got != want {
				t.Errorf("previous %s: got %q, want %q", name, got, want)
			}
		}
		if v, ok := valueOf(j.PreviousParameterValues, "debug"); ok {
			t.Errorf("previous values: got ephemeral debug=%q, want it never stored", v)
		}
	})
	t.Run("immutable refused on update", func(t *testing.T) {
		refused(t, values("region=eu"), "region", "immutable", "parameter region is immutable and cannot be updated")
	})
	t.Run("immutable given its own value", func(t *testing.T) {
		if j := build(t, values("region=us")); j == nil {
			t.Fatal("no job")
		}
	})
	t.Run("monotonic increasing", func(t *testing.T) {
		refused(t, values("disk=19"), "disk", "monotonic", "parameter value '19' must be equal or greater than previous value: 20")
		j := build(t, values("disk=30"))
		if got, _ := valueOf(j.RichParameterValues, "disk"); got != "30" {
			t.Errorf("disk: got %q, want 30", got)
		}
	})
	t.Run("monotonic decreasing", func(t *testing.T) {
		refused(t, values("quota=51"), "quota", "monotonic", "parameter value '51' must be equal or lower than previous value: 50")
		j := build(t, values("quota=50"))
		if got, _ := valueOf(j.RichParameterValues, "quota"); got != "50" {
			t.Errorf("quota: got %q, want 50", got)
		}
	})
	t.Run("several refusals at once", func(t *testing.T) {
		_, err := h.member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{
			Transition: codersdk.WorkspaceTransitionStart, RichParameterValues: values("cpu=99", "gpu=maybe"),
		})
		var e *codersdk.Error
		if !errors.As(err, &e) || e.StatusCode != http.StatusBadRequest {
			t.Fatalf("got %v, want a 400", err)
		}
		fields := []string{}
		for _, v := range e.Validations {
			fields = append(fields, v.Field)
		}
		if strings.Join(fields, ",") != "cpu,gpu" {
			t.Errorf("got validations for %v, want cpu,gpu", fields)
		}
		h.wantNoJob(t)
	})
	t.Run("ephemeral value of a canceled build is dropped", func(t *testing.T) {
		b, err := h.member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart, RichParameterValues: values("debug=on")})
		if err != nil {
			t.Fatal(err)
		}
		if j, err := h.d.DB.JobByID(ctx, b.Job.ID); err != nil || len(j.Input.EphemeralParameters) != 1 {
			t.Fatalf("queued job input: got %+v (%v), want the ephemeral value until hand-over", j.Input, err)
		}
		if err := h.member.CancelWorkspaceBuild(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		if j, err := h.d.DB.JobByID(ctx, b.Job.ID); err != nil || len(j.Input.EphemeralParameters) != 0 || j.Input.WorkspaceBuildID != b.ID {
			t.Errorf("canceled job input: got %+v (%v), want the build id and no ephemeral values", j.Input, err)
		}
	})
	t.Run("stop keeps the values", func(t *testing.T) {
		if _, err := h.member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err != nil {
			t.Fatal(err)
		}
		j := h.daemon.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`)})
		if got, _ := valueOf(j.RichParameterValues, "disk"); got != "30" {
			t.Errorf("stop build's disk: got %q, want 30", got)
		}
		ws, err := h.member.Workspace(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := valueOf(ws.LatestBuild.RichParameterValues, "cpu"); got != "4" {
			t.Errorf("stopped workspace's cpu: got %q, want 4", got)
		}
	})
}

func TestTemplateVersionParametersSorted(t *testing.T) {
	t.Parallel()
	h := newParamHarness(t)
	v, err := h.admin.TemplateVersion(context.Background(), h.template.ActiveVersionID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range v.Parameters {
		got = append(got, p.Name)
	}
	want := "region,login,prefix,cpu,mem,disk,quota,gpu,replicas,labels,langs,token,debug"
	if strings.Join(got, ",") != want {
		t.Errorf("parameters: got %s, want %s (by order, then name)", strings.Join(got, ","), want)
	}
	for _, p := range v.Parameters {
		if p.Name == "mem" && (p.ValidationMin == nil || *p.ValidationMin != 1 || p.ValidationError == "") {
			t.Errorf("mem: got %+v, want its validation kept", p)
		}
	}
}
