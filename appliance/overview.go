package appliance

import (
	"context"
	"fmt"
	"time"

	"airgapcoder/certs"
	"airgapcoder/coderd/codersdk"
)

// Overview describes the appliance installed in dir for the dashboard's
// Appliance page (GET /api/v2/appliance): the current release and its
// bundle, each component's version and health (as `coder appliance status`
// probes them), the providers and images its mirror serves, the appliance
// and imported CAs and the serving certificate with their expiry, and its
// disk. The last upgrade's outcome comes from the audit log, which coderd
// reads itself.
func Overview(ctx context.Context, dir string) (codersdk.Appliance, error) {
	st, m, err := getStatus(ctx, dir)
	if err != nil {
		return codersdk.Appliance{}, fmt.Errorf("appliance overview: %w", err)
	}
	out := codersdk.Appliance{
		Bundle: m.Name, Release: st.Release, PreviousRelease: st.Previous, BuiltAt: m.BuildTime, BuiltBy: m.ToolVersion,
		DiskUsed: st.DiskUsed, DiskFree: st.DiskFree,
		Components: []codersdk.ApplianceComponent{}, Providers: []codersdk.ApplianceProvider{}, Modules: []codersdk.ApplianceModule{}, Images: []codersdk.ApplianceImage{},
		Templates: []string{}, Certificates: []codersdk.ApplianceCertificate{},
	}
	for _, c := range st.Components {
		if c.Name == "coderd" && len(m.Components.Coder) > 0 {
			c.Version = m.Components.Coder[0].Version
		}
		out.Components = append(out.Components, codersdk.ApplianceComponent{Name: c.Name, Version: c.Version, State: c.State, Detail: c.Detail})
	}
	if tf := m.Components.Terraform; tf != nil {
		out.Components = append(out.Components, codersdk.ApplianceComponent{Name: "terraform", Version: tf.Version, Detail: "run by the built-in provisioners"})
	}
	for _, p := range m.Components.Providers {
		out.Providers = append(out.Providers, codersdk.ApplianceProvider{Source: p.Source, Version: p.Version, Platforms: p.Platforms})
	}
	for _, mod := range m.Components.Modules {
		out.Modules = append(out.Modules, codersdk.ApplianceModule{Source: mod.Source, Version: mod.Version})
	}
	for _, i := range m.Components.Images {
		out.Images = append(out.Images, codersdk.ApplianceImage{Reference: i.Ref, Digest: i.Digest, Platforms: i.Platforms})
	}
	for _, t := range m.Components.Templates {
		out.Templates = append(out.Templates, t.Name)
	}
	list, err := certs.List(st.Dir)
	if err != nil {
		return codersdk.Appliance{}, fmt.Errorf("appliance overview: %w", err)
	}
	now := time.Now()
	for _, c := range list {
		out.Certificates = append(out.Certificates, codersdk.ApplianceCertificate{
			Role: c.Role, Subject: c.Subject, Issuer: c.Issuer, NotAfter: c.NotAfter, SHA256: c.SHA256,
			ExpiresSoon: c.NotAfter.Sub(now) < certs.RenewBefore,
		})
	}
	return out, nil
}
