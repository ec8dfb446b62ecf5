package codersdk

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Appliance is what an appliance deployment says about itself (GET
// /api/v2/appliance, owners only; 404 when the deployment is a plain
// `coder server`): the installed bundle, its parts, what its mirror serves,
// the certificates it trusts and serves with, its disk, and how the last
// upgrade ended.
type Appliance struct {
	Bundle          string    `json:"bundle"`
	Release         string    `json:"release"`
	PreviousRelease string    `json:"previous_release,omitempty"`
	BuiltAt         time.Time `json:"built_at"`
	// BuiltBy is the version of the coder binary that built the bundle.
	BuiltBy      string                 `json:"built_by"`
	Components   []ApplianceComponent   `json:"components"`
	Providers    []ApplianceProvider    `json:"providers"`
	Modules      []ApplianceModule      `json:"modules"`
	Images       []ApplianceImage       `json:"images"`
	Templates    []string               `json:"templates"`
	Certificates []ApplianceCertificate `json:"certificates"`
	// Dir is the appliance's folder on its host.
	Dir string `json:"dir,omitempty"`
	// DiskUsed is what the files under Dir take; DiskFree and DiskTotal
	// are the free space (for an unprivileged user) and the size of the
	// filesystem that holds Dir.
	DiskUsed  int64 `json:"disk_used_bytes"`
	DiskFree  int64 `json:"disk_free_bytes"`
	DiskTotal int64 `json:"disk_total_bytes,omitempty"`
	// Config is the appliance's settings (appliance.yaml over the
	// defaults, by their yaml names), secrets redacted: the password of
	// postgres-url and anything named like a secret.
	Config map[string]any `json:"config,omitempty"`
	// Manifest is the installed release's manifest as the bundle carried
	// it (URLs' passwords redacted). Only GET /api/v2/debug/appliance
	// returns it; it is empty in GET /api/v2/appliance.
	Manifest json.RawMessage `json:"manifest,omitempty"`
	// LastUpgrade is the newest upgrade in the audit log (nil: none).
	LastUpgrade *ApplianceUpgrade `json:"last_upgrade,omitempty"`
}

// ApplianceComponent is one part of the appliance: its version and, for
// the running services, whether it answers.
type ApplianceComponent struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	// State is "ok", "down", "unknown", or "" for parts that do not run
	// (a binary in the bundle).
	State  string `json:"state,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// ApplianceProvider is a Terraform provider the mirror serves.
type ApplianceProvider struct {
	Source    string   `json:"source"`
	Version   string   `json:"version"`
	Platforms []string `json:"platforms"`
}

// ApplianceModule is a Terraform module the mirror's module registry
// serves.
type ApplianceModule struct {
	Source  string `json:"source"`
	Version string `json:"version"`
}

// ApplianceImage is a container image the mirror's registry serves.
type ApplianceImage struct {
	Reference string   `json:"reference"`
	Digest    string   `json:"digest"`
	Platforms []string `json:"platforms"`
}

// ApplianceCertificate is one certificate of the trust store (the
// appliance CA and imported CAs; the system roots are not listed) or the
// serving certificate.
type ApplianceCertificate struct {
	Role     string    `json:"role"`
	Subject  string    `json:"subject"`
	Issuer   string    `json:"issuer"`
	NotAfter time.Time `json:"not_after"`
	// ExpiresSoon is true within 30 days of NotAfter, and after it.
	ExpiresSoon bool   `json:"expires_soon"`
	SHA256      string `json:"sha256"`
	// PEM is the certificate (never its key).
	PEM string `json:"pem,omitempty"`
}

// ApplianceUpgrade is how the newest upgrade ended.
type ApplianceUpgrade struct {
	Time time.Time `json:"time"`
	// Outcome is "succeeded", "failed" or "rolled back".
	Outcome     string `json:"outcome"`
	Description string `json:"description"`
}

// Appliance returns the appliance's overview.
func (c *Client) Appliance(ctx context.Context) (Appliance, error) {
	return doJSON[Appliance](ctx, c, http.MethodGet, "/api/v2/appliance", nil)
}
