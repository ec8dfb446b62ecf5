package provider

import (
	"context"
	"regexp"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// agentResource is coder_agent: a workspace agent's identity (id, token) and
// the script that starts it. Nothing exists outside the state: Read and
// Delete have nothing to do.
type agentResource struct {
	env *buildEnv // nil until the provider is configured
}

type agentModel struct {
	ID                types.String `tfsdk:"id"`
	OS                types.String `tfsdk:"os"`
	Arch              types.String `tfsdk:"arch"`
	Dir               types.String `tfsdk:"dir"`
	Env               types.Map    `tfsdk:"env"`
	StartupScript     types.String `tfsdk:"startup_script"`
	ConnectionTimeout types.Int64  `tfsdk:"connection_timeout"`
	Token             types.String `tfsdk:"token"`
	InitScript        types.String `tfsdk:"init_script"`
}

var archPattern = regexp.MustCompile(`^[a-z0-9]+$`)

func (r *agentResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_agent"
}

func (r *agentResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Description: "A workspace agent. Run init_script in the workspace with the environment variable " +
			"CODER_AGENT_TOKEN set to token; the control plane learns the rest from the state.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The agent's UUID, created once.",
				PlanModifiers: keep,
			},
			"os": schema.StringAttribute{
				Required:    true,
				Description: "The workspace's operating system: linux, darwin or windows.",
				Validators:  []validator.String{oneOf{"linux", "darwin", "windows"}},
			},
			"arch": schema.StringAttribute{
				Required:    true,
				Description: "The workspace's architecture in Go's spelling: amd64, arm64, …",
				Validators: []validator.String{matches{archPattern,
					"must be an architecture in Go's spelling (lower-case letters and digits, such as amd64 or arm64)"}},
			},
			"dir": schema.StringAttribute{
				Optional:    true,
				Description: "The folder the agent starts shells and the startup script in.",
			},
			"env": schema.MapAttribute{
				Optional:    true,
				ElementType: types.StringType,
				Description: "Environment variables the agent sets for shells and the startup script.",
			},
			"startup_script": schema.StringAttribute{
				Optional:    true,
				Description: "A script the agent runs when it starts.",
			},
			"connection_timeout": schema.Int64Attribute{
				Optional:    true,
				Computed:    true,
				Default:     int64default.StaticInt64(120),
				Description: "Seconds after which a never-connected agent is shown as timed out; 0 disables.",
				Validators:  []validator.Int64{between{0, 7 * 24 * 3600}},
			},
			"token": schema.StringAttribute{
				Computed:      true,
				Sensitive:     true,
				Description:   "The agent's secret, created once. Pass it as CODER_AGENT_TOKEN.",
				PlanModifiers: keep,
			},
			"init_script": schema.StringAttribute{
				Computed:    true,
				Description: "The script that downloads the agent from the control plane and starts it (sh, or PowerShell for windows).",
			},
		},
	}
}

func (r *agentResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.env = envFrom(req.ProviderData, &resp.Diagnostics)
}

// ModifyPlan computes init_script at plan time, so that a plan shows it and
// a change of URL or CA updates the agent in place.
func (r *agentResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.env == nil {
		return // destroy, or the provider configuration is not known yet
	}
	var goos, arch types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("os"), &goos)...)
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("arch"), &arch)...)
	if resp.Diagnostics.HasError() || goos.IsUnknown() || arch.IsUnknown() {
		return
	}
	if r.env.URLDefaulted {
		resp.Diagnostics.AddWarning("No access URL",
			"Neither the provider's url nor CODER_URL is set: the init script downloads the agent from "+DefaultURL+".")
	}
	script := r.initScript(goos.ValueString(), arch.ValueString())
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("init_script"), types.StringValue(script))...)
}

func (r *agentResource) initScript(goos, arch string) string {
	return initScript(initScriptInput{URL: r.env.URL, OS: goos, Arch: arch, CAPEM: r.env.CAPEM})
}

// fill sets what the plan left unknown: a new id and token on create, and
// init_script when os or arch were unknown at plan time.
func (r *agentResource) fill(m *agentModel, diags *diag.Diagnostics) {
	if m.ID.IsUnknown() {
		m.ID = types.StringValue(uuid.NewString())
	}
	if m.Token.IsUnknown() {
		m.Token = types.StringValue(uuid.NewString())
	}
	if m.InitScript.IsUnknown() {
		if r.env == nil {
			diags.AddError("Provider not configured", "coder_agent needs the provider's configuration to write init_script.")
			return
		}
		m.InitScript = types.StringValue(r.initScript(m.OS.ValueString(), m.Arch.ValueString()))
	}
}

func (r *agentResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m agentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.fill(&m, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *agentResource) Read(context.Context, resource.ReadRequest, *resource.ReadResponse) {}

func (r *agentResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m agentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.fill(&m, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *agentResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {}
