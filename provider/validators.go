package provider

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

// oneOf accepts a string from a fixed list.
type oneOf []string

func (v oneOf) Description(context.Context) string {
	return "must be one of " + strings.Join(v, ", ")
}

func (v oneOf) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v oneOf) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if got := req.ConfigValue.ValueString(); !slices.Contains(v, got) {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid value",
			fmt.Sprintf("%s: got %q, want one of %s", req.Path, got, strings.Join(v, ", ")))
	}
}

// matches accepts a string that matches re; desc says in words what it
// accepts.
type matches struct {
	re   *regexp.Regexp
	desc string
}

func (v matches) Description(context.Context) string { return v.desc }

func (v matches) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v matches) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if got := req.ConfigValue.ValueString(); !v.re.MatchString(got) {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid value",
			fmt.Sprintf("%s: got %q, but it %s", req.Path, got, v.desc))
	}
}

// urlValidator accepts an absolute http or https URL.
type urlValidator struct{}

func (urlValidator) Description(context.Context) string {
	return "must be an absolute http or https URL"
}

func (v urlValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (urlValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := normalizeURL(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid URL", fmt.Sprintf("%s: %v", req.Path, err))
	}
}

// between accepts an integer in [min, max].
type between struct{ min, max int64 }

func (v between) Description(context.Context) string {
	return fmt.Sprintf("must be between %d and %d", v.min, v.max)
}

func (v between) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v between) ValidateInt64(ctx context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if got := req.ConfigValue.ValueInt64(); got < v.min || got > v.max {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid value",
			fmt.Sprintf("%s: got %d, want between %d and %d", req.Path, got, v.min, v.max))
	}
}

// envFrom returns the build context handed to a resource's or data source's
// Configure, or nil when the provider is not configured yet.
func envFrom(data any, diags *diag.Diagnostics) *buildEnv {
	if data == nil {
		return nil
	}
	e, ok := data.(*buildEnv)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("got %T, want *buildEnv: a bug in the provider", data))
		return nil
	}
	return e
}
