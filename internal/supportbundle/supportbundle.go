// Package supportbundle writes what a deployment says about itself into one
// zip archive, to carry out of the gap to whoever diagnoses it (as Coder's
// `coder support bundle`): versions, every component's health, the
// replica's recent logs, its process and host memory, PostgreSQL's
// settings and sizes, the appliance's overview (its status, release and
// manifest, settings, certificates without keys, disk figures), the
// certificate chain the deployment served to this client, replicas, the
// newest audit records and, for a workspace, its builds' and agents'
// logs. docs/architecture.md ("Support bundle") lists the files.
//
// Everything comes through the API with the caller's session, so the
// bundle holds only what that user may read, and the API returns no
// password, token, PSK or private key. As a last net every file passes
// through package redact before it is written. The archive lists what
// could not be collected (a member may read neither the health report nor
// the logs) in errors.txt rather than failing. It must not read the
// appliance's files or database.
package supportbundle

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/bytesize"
	"airgapcoder/internal/redact"
)

// Options configure Write.
type Options struct {
	Client *codersdk.Client
	// Workspace, when set, is a workspace (NAME or OWNER/NAME) whose
	// builds and agents the bundle describes too.
	Workspace string
	// AuditRecords is how many of the newest audit records go in (default
	// 200).
	AuditRecords int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Write writes the bundle to w and returns the names of its files.
func Write(ctx context.Context, w io.Writer, opts Options) ([]string, error) {
	if opts.AuditRecords <= 0 {
		opts.AuditRecords = 200
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	z := zip.NewWriter(w)
	b := &bundle{z: z, now: opts.Now()}
	c := opts.Client
	b.json("buildinfo.json", func() (any, error) { return c.BuildInfo(ctx) })
	b.tlsChain(ctx, c)
	b.json("health.json", func() (any, error) { return c.DebugHealth(ctx) })
	b.text("logs.txt", func() ([]byte, error) { return c.DebugLogs(ctx) })
	b.json("system.json", func() (any, error) { return c.DebugSystem(ctx) })
	b.json("postgres.json", func() (any, error) { return c.DebugPostgres(ctx) })
	b.appliance(ctx, c)
	b.json("replicas.json", func() (any, error) { return c.Replicas(ctx) })
	b.json("audit.json", func() (any, error) {
		return c.AuditLogs(ctx, codersdk.AuditLogsRequest{Limit: opts.AuditRecords})
	})
	if opts.Workspace != "" {
		b.workspace(ctx, c, opts.Workspace)
	}
	if len(b.errors) > 0 {
		b.file("errors.txt", []byte(strings.Join(b.errors, "\n")+"\n"))
	}
	if b.err == nil {
		b.err = z.Close()
	}
	return b.names, b.err
}

type bundle struct {
	z      *zip.Writer
	now    time.Time
	names  []string
	errors []string
	err    error // a write that failed: the archive is broken
}

// file writes data as name, through redact.String.
func (b *bundle) file(name string, data []byte) {
	if b.err != nil {
		return
	}
	f, err := b.z.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: b.now})
	if err == nil {
		_, err = io.WriteString(f, redact.String(string(data)))
	}
	if err != nil {
		b.err = fmt.Errorf("write %s: %w", name, err)
		return
	}
	b.names = append(b.names, name)
}

// fail notes why name could not be collected.
func (b *bundle) fail(name string, err error) {
	b.errors = append(b.errors, fmt.Sprintf("%s: %v", name, err))
}

// json writes what get returns as name, or notes why it could not.
func (b *bundle) json(name string, get func() (any, error)) {
	v, err := get()
	if err != nil {
		b.fail(name, err)
		return
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b.fail(name, err)
		return
	}
	b.file(name, append(data, '\n'))
}

// text writes what get returns as name, or notes why it could not.
func (b *bundle) text(name string, get func() ([]byte, error)) {
	data, err := get()
	if err != nil {
		b.fail(name, err)
		return
	}
	b.file(name, data)
}

// appliance writes the appliance's overview (appliance.json), its
// release's manifest, its settings, its certificates as PEM and its status
// as `coder appliance status` shows it. A plain coder server has none.
func (b *bundle) appliance(ctx context.Context, c *codersdk.Client) {
	a, err := c.DebugAppliance(ctx)
	if err != nil {
		b.fail("appliance.json", err)
		return
	}
	manifest, config := a.Manifest, a.Config
	var certs bytes.Buffer
	for i, cert := range a.Certificates {
		if cert.PEM != "" {
			fmt.Fprintf(&certs, "# %s: %s (issuer %s, expires %s, sha256 %s)\n%s", cert.Role, cert.Subject, cert.Issuer, cert.NotAfter.UTC().Format(time.RFC3339), cert.SHA256, cert.PEM)
		}
		a.Certificates[i].PEM = ""
	}
	a.Manifest, a.Config = nil, nil
	b.json("appliance.json", func() (any, error) { return a, nil })
	b.file("appliance/status.txt", applianceStatus(a))
	if len(manifest) > 0 {
		var indented bytes.Buffer
		if json.Indent(&indented, manifest, "", "  ") != nil {
			indented.Reset()
			indented.Write(manifest)
		}
		b.file("appliance/manifest.json", append(indented.Bytes(), '\n'))
	}
	if config != nil {
		b.json("appliance/config.json", func() (any, error) { return config, nil })
	}
	if certs.Len() > 0 {
		b.file("appliance/certificates.pem", certs.Bytes())
	}
}

// applianceStatus is the table `coder appliance status` prints, from the
// overview.
func applianceStatus(a codersdk.Appliance) []byte {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tSTATE\tDETAIL")
	previous := a.PreviousRelease
	if previous == "" {
		previous = "-"
	}
	fmt.Fprintf(tw, "bundle\t%s %s\tprevious: %s\n", a.Bundle, a.Release, previous)
	fmt.Fprintf(tw, "providers\t%d\t\n", len(a.Providers))
	fmt.Fprintf(tw, "images\t%d\t\n", len(a.Images))
	fmt.Fprintf(tw, "templates\t%d\t\n", len(a.Templates))
	fmt.Fprintf(tw, "disk\t%s used\t%s free of %s (%s)\n", bytesize.Format(a.DiskUsed), bytesize.Format(a.DiskFree), bytesize.Format(a.DiskTotal), a.Dir)
	for _, c := range a.Components {
		state := c.State
		if state == "" {
			state = "-"
		}
		detail := c.Detail
		if c.Version != "" {
			detail = strings.TrimSpace(c.Version + " " + detail)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, state, detail)
	}
	if u := a.LastUpgrade; u != nil {
		fmt.Fprintf(tw, "last upgrade\t%s\t%s at %s\n", u.Outcome, u.Description, u.Time.UTC().Format(time.RFC3339))
	}
	_ = tw.Flush()
	return buf.Bytes()
}

// tlsChain writes the certificates the deployment served this client
// (tls/chain.pem, certificates only) and the connection's parameters
// (tls/connection.json).
func (b *bundle) tlsChain(ctx context.Context, c *codersdk.Client) {
	resp, err := c.Request(ctx, http.MethodGet, "/api/v2/buildinfo", nil)
	if err != nil {
		b.fail("tls/chain.pem", err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.TLS == nil {
		b.fail("tls/chain.pem", fmt.Errorf("%s answered over plain HTTP: there is no certificate chain", c.URL.Redacted()))
		return
	}
	st := resp.TLS
	type certInfo struct {
		Subject   string    `json:"subject"`
		Issuer    string    `json:"issuer"`
		DNSNames  []string  `json:"dns_names,omitempty"`
		IPs       []string  `json:"ip_addresses,omitempty"`
		NotBefore time.Time `json:"not_before"`
		NotAfter  time.Time `json:"not_after"`
		IsCA      bool      `json:"is_ca"`
		SHA256    string    `json:"sha256"`
	}
	describe := func(certs []*x509.Certificate) []certInfo {
		out := []certInfo{}
		for _, cert := range certs {
			sum := sha256.Sum256(cert.Raw)
			ci := certInfo{Subject: cert.Subject.String(), Issuer: cert.Issuer.String(), DNSNames: cert.DNSNames,
				NotBefore: cert.NotBefore.UTC(), NotAfter: cert.NotAfter.UTC(), IsCA: cert.IsCA, SHA256: hex.EncodeToString(sum[:])}
			for _, ip := range cert.IPAddresses {
				ci.IPs = append(ci.IPs, ip.String())
			}
			out = append(out, ci)
		}
		return out
	}
	info := struct {
		URL        string       `json:"url"`
		Version    string       `json:"version"`
		Cipher     string       `json:"cipher_suite"`
		ServerName string       `json:"server_name"`
		Protocol   string       `json:"negotiated_protocol,omitempty"`
		Resumed    bool         `json:"resumed"`
		Served     []certInfo   `json:"served_chain"`
		Verified   [][]certInfo `json:"verified_chains"`
	}{
		URL: c.URL.Redacted(), Version: tls.VersionName(st.Version), Cipher: tls.CipherSuiteName(st.CipherSuite),
		ServerName: st.ServerName, Protocol: st.NegotiatedProtocol, Resumed: st.DidResume,
		Served: describe(st.PeerCertificates), Verified: [][]certInfo{},
	}
	for _, chain := range st.VerifiedChains {
		info.Verified = append(info.Verified, describe(chain))
	}
	var chain bytes.Buffer
	for _, cert := range st.PeerCertificates {
		fmt.Fprintf(&chain, "# %s (issuer %s)\n", cert.Subject, cert.Issuer)
		_ = pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	}
	b.file("tls/chain.pem", chain.Bytes())
	b.json("tls/connection.json", func() (any, error) { return info, nil })
}

// workspace adds a workspace, its latest build's logs and its agents'
// logs.
func (b *bundle) workspace(ctx context.Context, c *codersdk.Client, arg string) {
	owner, name := codersdk.Me, arg
	if o, n, ok := strings.Cut(arg, "/"); ok {
		owner, name = o, n
	}
	ws, err := c.WorkspaceByOwnerAndName(ctx, owner, name)
	if err != nil {
		b.fail("workspace "+arg, err)
		return
	}
	b.json("workspace/workspace.json", func() (any, error) { return ws, nil })
	var logs strings.Builder
	err = c.WorkspaceBuildLogs(ctx, ws.LatestBuild.ID, 0, false, func(l codersdk.ProvisionerJobLog) error {
		fmt.Fprintf(&logs, "%s %s %s %s\n", l.CreatedAt.UTC().Format(time.RFC3339), l.Level, l.Stage, l.Output)
		return nil
	})
	if err != nil {
		b.fail("workspace/build.log", err)
	} else {
		b.file("workspace/build.log", []byte(logs.String()))
	}
	for _, r := range ws.LatestBuild.Resources {
		for _, a := range r.Agents {
			name := "workspace/agent-" + a.Name
			b.json(name+".json", func() (any, error) { return c.WorkspaceAgent(ctx, a.ID) })
			b.json(name+"-logs.json", func() (any, error) { return c.WorkspaceAgentLogs(ctx, a.ID, 0) })
		}
	}
}
