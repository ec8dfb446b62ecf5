package provider

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// workspaceDataSource is coder_workspace: the workspace being built, from
// the environment.
type workspaceDataSource struct {
	env *buildEnv
}

type workspaceModel struct {
	ID           types.String `tfsdk:"id"`
	Name         types.String `tfsdk:"name"`
	Owner        types.String `tfsdk:"owner"`
	OwnerID      types.String `tfsdk:"owner_id"`
	Transition   types.String `tfsdk:"transition"`
	StartCount   types.Int64  `tfsdk:"start_count"`
	AccessURL    types.String `tfsdk:"access_url"`
	TemplateName types.String `tfsdk:"template_name"`
}

func (d *workspaceDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_workspace"
}

func (d *workspaceDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	computed := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, Description: desc}
	}
	resp.Schema = schema.Schema{
		Description: "The workspace this build is for (from the provisioner's CODER_WORKSPACE_* variables).",
		Attributes: map[string]schema.Attribute{
			"id":            computed("The workspace's UUID (CODER_WORKSPACE_ID)."),
			"name":          computed("The workspace's name (CODER_WORKSPACE_NAME; default \"default\")."),
			"owner":         computed("The owner's user name (CODER_WORKSPACE_OWNER; default \"default\")."),
			"owner_id":      computed("The owner's UUID (CODER_WORKSPACE_OWNER_ID)."),
			"transition":    computed("start or stop: what this build does (CODER_WORKSPACE_TRANSITION; default start)."),
			"access_url":    computed("The deployment's access URL (the provider's url, or CODER_URL)."),
			"template_name": computed("The template's name (CODER_WORKSPACE_TEMPLATE_NAME)."),
			"start_count": schema.Int64Attribute{
				Computed:    true,
				Description: "1 when the workspace starts, 0 when it stops: use it as count on resources that run only while the workspace is up.",
			},
		},
	}
}

func (d *workspaceDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.env = envFrom(req.ProviderData, &resp.Diagnostics)
}

func (d *workspaceDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	e := d.env
	if e == nil {
		resp.Diagnostics.AddError("Provider not configured", "coder_workspace needs the provider's configuration.")
		return
	}
	var start int64
	if e.Transition == "start" {
		start = 1
	}
	m := workspaceModel{
		ID:           types.StringValue(e.WorkspaceID),
		Name:         types.StringValue(e.WorkspaceName),
		Owner:        types.StringValue(e.WorkspaceOwner),
		OwnerID:      types.StringValue(e.WorkspaceOwnerID),
		Transition:   types.StringValue(e.Transition),
		StartCount:   types.Int64Value(start),
		AccessURL:    types.StringValue(e.URL),
		TemplateName: types.StringValue(e.TemplateName),
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// provisionerDataSource is coder_provisioner: the provisioner running the
// build, from the environment.
type provisionerDataSource struct {
	env *buildEnv
}

type provisionerModel struct {
	ID   types.String `tfsdk:"id"`
	OS   types.String `tfsdk:"os"`
	Arch types.String `tfsdk:"arch"`
	Tags types.Map    `tfsdk:"tags"`
}

func (d *provisionerDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_provisioner"
}

func (d *provisionerDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The provisioner running this build (from CODER_PROVISIONER_OS, _ARCH and _TAGS).",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:    true,
				Description: "A UUID derived from os, arch and tags: the same for the same provisioner kind.",
			},
			"os": schema.StringAttribute{
				Computed:    true,
				Description: "The provisioner's operating system in Go's spelling (default: the provider's own).",
			},
			"arch": schema.StringAttribute{
				Computed:    true,
				Description: "The provisioner's architecture in Go's spelling (default: the provider's own).",
			},
			"tags": schema.MapAttribute{
				Computed:    true,
				ElementType: types.StringType,
				Description: "The provisioner's tags.",
			},
		},
	}
}

func (d *provisionerDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.env = envFrom(req.ProviderData, &resp.Diagnostics)
}

// provisionerNamespace scopes the name-based provisioner ids.
var provisionerNamespace = uuid.MustParse("6a3e8f0c-3b7e-4c55-9a51-6f1b0f6f3c01")

func (d *provisionerDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	e := d.env
	if e == nil {
		resp.Diagnostics.AddError("Provider not configured", "coder_provisioner needs the provider's configuration.")
		return
	}
	tagsJSON, _ := json.Marshal(e.ProvisionerTags) // sorted keys: a stable name
	id := uuid.NewSHA1(provisionerNamespace, []byte(e.ProvisionerOS+"/"+e.ProvisionerArch+"/"+string(tagsJSON)))
	tags, diags := types.MapValueFrom(ctx, types.StringType, e.ProvisionerTags)
	resp.Diagnostics.Append(diags...)
	m := provisionerModel{
		ID:   types.StringValue(id.String()),
		OS:   types.StringValue(e.ProvisionerOS),
		Arch: types.StringValue(e.ProvisionerArch),
		Tags: tags,
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
