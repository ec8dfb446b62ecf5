package provider

import (
	"context"
	"regexp"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// appResource is coder_app: an app an agent exposes through the control
// plane, at a URL inside the workspace or at a port on the workspace's
// localhost. Like coder_agent it exists only in the state.
type appResource struct{}

type appModel struct {
	ID          types.String `tfsdk:"id"`
	AgentID     types.String `tfsdk:"agent_id"`
	Slug        types.String `tfsdk:"slug"`
	DisplayName types.String `tfsdk:"display_name"`
	URL         types.String `tfsdk:"url"`
	Port        types.Int64  `tfsdk:"port"`
	Share       types.String `tfsdk:"share"`
}

// slugPattern is Coder's rule for app slugs: lower-case letters and digits,
// single hyphens between them.
var slugPattern = regexp.MustCompile(`^[a-z0-9](-?[a-z0-9])*$`)

func (r *appResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_app"
}

func (r *appResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "An app that an agent exposes through the control plane: set exactly one of url and port.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The app's UUID, created once.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"agent_id": schema.StringAttribute{
				Required:      true,
				Description:   "The id of the coder_agent that serves the app.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"slug": schema.StringAttribute{
				Required:    true,
				Description: "The app's name in URLs: lower-case letters and digits, with single hyphens between them.",
				Validators: []validator.String{matches{slugPattern,
					"must be lower-case letters and digits with single hyphens between them, such as code-server"}},
			},
			"display_name": schema.StringAttribute{
				Optional:    true,
				Description: "The app's name on the dashboard.",
			},
			"url": schema.StringAttribute{
				Optional:    true,
				Description: "The app's http or https URL as the agent reaches it, such as http://localhost:8080/?folder=/home/coder.",
				Validators:  []validator.String{urlValidator{}},
			},
			"port": schema.Int64Attribute{
				Optional:    true,
				Description: "The TCP port on the workspace's localhost that serves the app over http.",
				Validators:  []validator.Int64{between{1, 65535}},
			},
			"share": schema.StringAttribute{
				Optional:    true,
				Computed:    true,
				Default:     stringdefault.StaticString("owner"),
				Description: "Who may open the app: owner (the default), authenticated (any signed-in user) or public.",
				Validators:  []validator.String{oneOf{"owner", "authenticated", "public"}},
			},
		},
	}
}

// ValidateConfig requires exactly one of url and port (once both are known).
func (r *appResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var u types.String
	var port types.Int64
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("url"), &u)...)
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("port"), &port)...)
	if resp.Diagnostics.HasError() || u.IsUnknown() || port.IsUnknown() {
		return
	}
	switch {
	case !u.IsNull() && !port.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("port"), "Conflicting app target",
			"coder_app: set exactly one of url and port, not both")
	case u.IsNull() && port.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("url"), "Missing app target",
			"coder_app: set exactly one of url and port")
	}
}

func (r *appResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m appModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.ID = types.StringValue(uuid.NewString())
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *appResource) Read(context.Context, resource.ReadRequest, *resource.ReadResponse) {}

func (r *appResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m appModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *appResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {}
