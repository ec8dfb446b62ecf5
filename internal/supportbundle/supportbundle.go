// Package supportbundle writes what a deployment says about itself into one
// zip archive, to carry out of the gap to whoever diagnoses it (as Coder's
// `coder support bundle`): versions, every component's health, the
// appliance's overview (its release, components, certificates without
// keys, disk figures), replicas, the newest audit records and, for a
// workspace, its builds' and agents' logs.
//
// Everything comes through the API with the caller's session, so the
// bundle holds only what that user may read, and the API returns no
// password, token, PSK or private key. The archive lists what could not be
// collected (a member may not read the health report) in errors.txt rather
// than failing. It must not read the appliance's files or database.
package supportbundle

import (
	"archive/zip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"airgapcoder/coderd/codersdk"
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
	b.json("health.json", func() (any, error) { return c.DebugHealth(ctx) })
	b.json("appliance.json", func() (any, error) { return c.Appliance(ctx) })
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

func (b *bundle) file(name string, data []byte) {
	if b.err != nil {
		return
	}
	f, err := b.z.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: b.now})
	if err == nil {
		_, err = f.Write(data)
	}
	if err != nil {
		b.err = fmt.Errorf("write %s: %w", name, err)
		return
	}
	b.names = append(b.names, name)
}

// json writes what get returns as name, or notes why it could not.
func (b *bundle) json(name string, get func() (any, error)) {
	v, err := get()
	if err != nil {
		b.errors = append(b.errors, fmt.Sprintf("%s: %v", name, err))
		return
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b.errors = append(b.errors, fmt.Sprintf("%s: %v", name, err))
		return
	}
	b.file(name, append(data, '\n'))
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
		b.errors = append(b.errors, fmt.Sprintf("workspace %s: %v", arg, err))
		return
	}
	b.json("workspace/workspace.json", func() (any, error) { return ws, nil })
	var logs strings.Builder
	err = c.WorkspaceBuildLogs(ctx, ws.LatestBuild.ID, 0, false, func(l codersdk.ProvisionerJobLog) error {
		fmt.Fprintf(&logs, "%s %s %s %s\n", l.CreatedAt.UTC().Format(time.RFC3339), l.Level, l.Stage, l.Output)
		return nil
	})
	if err != nil {
		b.errors = append(b.errors, fmt.Sprintf("workspace/build.log: %v", err))
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
