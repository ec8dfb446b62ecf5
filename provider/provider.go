package provider

import (
	"context"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	fwprovider "github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Address is the provider's source address, as templates write it in
// required_providers and as the provider mirror lays it out.
const Address = "coder.internal/appliance/coder"

// New returns the constructor that providerserver.Serve wants, for a
// provider reporting version.
func New(version string) func() fwprovider.Provider {
	return func() fwprovider.Provider {
		return &coderProvider{version: version, lookup: os.LookupEnv}
	}
}

type coderProvider struct {
	version string
	lookup  func(string) (string, bool) // os.LookupEnv
}

type providerModel struct {
	URL types.String `tfsdk:"url"`
}

func (p *coderProvider) Metadata(_ context.Context, _ fwprovider.MetadataRequest, resp *fwprovider.MetadataResponse) {
	resp.TypeName = "coder"
	resp.Version = p.version
}

func (p *coderProvider) Schema(_ context.Context, _ fwprovider.SchemaRequest, resp *fwprovider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The air-gapped Coder appliance's provider: declares the workspace agent and apps, " +
			"and tells a template about the workspace and provisioner of the build. It never talks to the network.",
		Attributes: map[string]schema.Attribute{
			"url": schema.StringAttribute{
				Optional:    true,
				Description: "The deployment's access URL; overrides CODER_URL.",
				Validators:  []validator.String{urlValidator{}},
			},
		},
	}
}

func (p *coderProvider) Configure(ctx context.Context, req fwprovider.ConfigureRequest, resp *fwprovider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if cfg.URL.IsUnknown() {
		// Known only after apply: resources see no provider data until then.
		return
	}
	env, err := readEnv(p.lookup, cfg.URL.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("Invalid provider environment", err.Error())
		return
	}
	resp.ResourceData = env
	resp.DataSourceData = env
}

func (p *coderProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		func() resource.Resource { return &agentResource{} },
		func() resource.Resource { return &appResource{} },
	}
}

func (p *coderProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		func() datasource.DataSource { return &workspaceDataSource{} },
		func() datasource.DataSource { return &provisionerDataSource{} },
	}
}
