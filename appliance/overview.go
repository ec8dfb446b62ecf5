package appliance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"time"

	"airgapcoder/certs"
	"airgapcoder/codersdk"
	"airgapcoder/internal/redact"
)

// Overview describes the appliance installed in dir for the dashboard's
// Appliance page (GET /api/v2/appliance) and for support bundles (GET
// /api/v2/debug/appliance): the current release and its bundle, each
// component's version and health (as `coder appliance status` probes
// them, with the supervisor's restarts and the egress guard's refusals),
// the providers and images its mirror serves, the appliance and imported
// CAs and the serving certificate with their expiry and PEM (never a key),
// its disk, its settings with secrets redacted, and the release's
// manifest. The last upgrade's outcome comes from the audit log, which
// coderd reads itself.
func Overview(ctx context.Context, dir string) (codersdk.Appliance, error) {
	st, m, err := getStatus(ctx, dir)
	if err != nil {
		return codersdk.Appliance{}, fmt.Errorf("appliance overview: %w", err)
	}
	out := codersdk.Appliance{
		Bundle: m.Name, Release: st.Release, PreviousRelease: st.Previous, BuiltAt: m.BuildTime, BuiltBy: m.ToolVersion,
		Dir: st.Dir, DiskUsed: st.DiskUsed, DiskFree: st.DiskFree, DiskTotal: diskTotal(st.Dir),
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
	pems := certificatePEMs(st.Dir)
	now := time.Now()
	for _, c := range list {
		out.Certificates = append(out.Certificates, codersdk.ApplianceCertificate{
			Role: c.Role, Subject: c.Subject, Issuer: c.Issuer, NotAfter: c.NotAfter, SHA256: c.SHA256,
			ExpiresSoon: c.NotAfter.Sub(now) < certs.RenewBefore, PEM: pems[c.SHA256],
		})
	}
	// getStatus has read both already; neither can hold a secret once
	// redacted.
	if cfg, err := LoadConfig(st.Dir, nil); err == nil {
		out.Config = redactedConfig(cfg)
	}
	if b, err := os.ReadFile(filepath.Join(Layout{Dir: st.Dir}.Release(st.Release), manifestFile)); err == nil && json.Valid(b) {
		out.Manifest = json.RawMessage(redact.String(string(b)))
	}
	return out, nil
}

// redactedConfig is c by yaml name, every text value through
// redact.Value: the password of postgres-url, and the whole value of any
// setting named like a secret, become "[redacted]".
func redactedConfig(c Config) map[string]any { return redactedFields(reflect.ValueOf(c)) }

// redactedFields is redactedConfig of any struct of koanf-tagged fields; a
// list of such structs (external-auth) becomes a list of their maps, each
// field redacted by its own name (client-secret).
func redactedFields(v reflect.Value) map[string]any {
	out := map[string]any{}
	for i := range v.NumField() {
		key := v.Type().Field(i).Tag.Get("koanf")
		if key == "" {
			continue
		}
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			out[key] = redact.Value(key, f.String())
		case reflect.Slice:
			if f.Type().Elem().Kind() == reflect.Struct {
				list := []map[string]any{}
				for j := range f.Len() {
					list = append(list, redactedFields(f.Index(j)))
				}
				out[key] = list
				continue
			}
			list := []string{}
			for j := range f.Len() {
				list = append(list, redact.Value(key, fmt.Sprint(f.Index(j).Interface())))
			}
			out[key] = list
		case reflect.Bool, reflect.Int, reflect.Int64:
			out[key] = f.Interface()
		default:
			out[key] = redact.Value(key, fmt.Sprint(f.Interface()))
		}
	}
	return out
}

// certificatePEMs maps the fingerprint (hex sha256 of the DER) of every
// certificate in the appliance CA, the imported CAs and the serving
// certificate files to its PEM. Only CERTIFICATE blocks are read: a key
// in the same file stays there.
func certificatePEMs(dir string) map[string]string {
	files := []string{filepath.Join(certs.CertsDir(dir), certs.CAFile), filepath.Join(certs.CertsDir(dir), certs.ServerFile)}
	imported, _ := filepath.Glob(filepath.Join(certs.CertsDir(dir), certs.ImportedDir, "*.pem"))
	out := map[string]string{}
	for _, f := range append(files, imported...) {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, der := range certs.CertificateBlocks(raw) {
			sum := sha256.Sum256(der)
			out[hex.EncodeToString(sum[:])] = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
		}
	}
	return out
}

// diskTotal is the size of the filesystem that holds dir (0 when unknown).
func diskTotal(dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Blocks) * int64(st.Bsize)
}
