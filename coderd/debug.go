package coderd

import (
	"errors"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/agent/agentstat"
	"airgapcoder/codersdk"
	"airgapcoder/internal/redact"
)

// The owners' diagnostics under /api/v2/debug besides the health report
// (coderd.go): what `coder support bundle` collects. Each answers 403 to
// anyone but an owner and holds no secret: logs come redacted from
// Options.RecentLogs, PostgreSQL settings that can hold one are masked,
// and the appliance's overview redacts its own.

// processStart is when this process started (near enough: when the
// package was initialized).
var processStart = time.Now()

// debugLogs is GET /api/v2/debug/logs: this replica's newest log lines,
// oldest first, as text (one record a line). The Coder-Log-Lines-Dropped
// header says how many older lines the ring no longer holds.
func (api *API) debugLogs(c *gin.Context) error {
	if err := authorize(c, resDeploymentStats, actRead, ""); err != nil {
		return err
	}
	if api.opts.RecentLogs == nil {
		return notFound("Recent logs (this server was started without a log ring)")
	}
	lines, dropped := api.opts.RecentLogs.Lines()
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	c.Header("Coder-Log-Lines-Dropped", strconv.FormatUint(dropped, 10))
	c.Data(http.StatusOK, "text/plain; charset=utf-8", []byte(b.String()))
	return nil
}

// debugSystem is GET /api/v2/debug/system: the answering replica's
// process (the Go runtime's memory) and host (memory, its cgroup's).
func (api *API) debugSystem(c *gin.Context) error {
	if err := authorize(c, resDeploymentStats, actRead, ""); err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r := codersdk.SystemReport{
		Time: api.now(), OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		PID: os.Getpid(), StartedAt: processStart.UTC(), Goroutines: runtime.NumGoroutine(),
		Process: codersdk.ProcessMemory{
			Sys: ms.Sys, HeapAlloc: ms.HeapAlloc, HeapInuse: ms.HeapInuse, HeapIdle: ms.HeapIdle, StackInuse: ms.StackInuse, NumGC: ms.NumGC,
		},
	}
	r.Hostname, _ = os.Hostname()
	memory := func(name string, read func() (agentstat.Result, error)) *codersdk.MemoryUse {
		res, err := read()
		if err != nil {
			if !errors.Is(err, agentstat.ErrUnsupported) {
				r.Errors = append(r.Errors, name+": "+err.Error())
			}
			return nil
		}
		m := &codersdk.MemoryUse{Used: int64(res.Used)}
		if res.Total != nil {
			m.Total = int64(*res.Total)
		}
		return m
	}
	if st, err := agentstat.New(); err == nil {
		r.HostMemory = memory("host memory", st.HostMemory)
		r.CgroupMemory = memory("cgroup memory", st.ContainerMemory)
	} else if !errors.Is(err, agentstat.ErrUnsupported) {
		r.Errors = append(r.Errors, "memory: "+err.Error())
	}
	c.JSON(http.StatusOK, r)
	return nil
}

// largestTables is how many tables GET /api/v2/debug/postgres lists.
const largestTables = 25

// secretPostgresSettings can hold a password or a command with one in
// it: their values are masked whatever they look like.
var secretPostgresSettings = map[string]bool{
	"primary_conninfo": true, "ssl_passphrase_command": true, "archive_command": true, "archive_library": true,
	"restore_command": true, "archive_cleanup_command": true, "recovery_end_command": true,
}

// debugPostgres is GET /api/v2/debug/postgres: the database server's
// version, this database's size and connections, pg_settings (those that
// can hold a secret masked) and the largest tables.
func (api *API) debugPostgres(c *gin.Context) error {
	if err := authorize(c, resDeploymentStats, actRead, ""); err != nil {
		return err
	}
	ctx := c.Request.Context()
	srv, err := api.db.PostgresServer(ctx)
	if err != nil {
		return err
	}
	settings, err := api.db.PostgresSettings(ctx)
	if err != nil {
		return err
	}
	tables, err := api.db.LargestTables(ctx, largestTables)
	if err != nil {
		return err
	}
	r := codersdk.PostgresReport{
		Time: api.now(), Version: srv.Version, ServerVersion: srv.ServerVersion, StartedAt: srv.StartedAt.UTC(), InRecovery: srv.InRecovery,
		Database: srv.Database, DatabaseSize: srv.DatabaseSize, Connections: srv.Connections,
		Settings: make([]codersdk.PostgresSetting, 0, len(settings)), Tables: make([]codersdk.PostgresTable, 0, len(tables)),
	}
	for _, s := range settings {
		r.Settings = append(r.Settings, codersdk.PostgresSetting{Name: s.Name, Setting: postgresSettingValue(s.Name, s.Setting), Unit: s.Unit, Source: s.Source})
	}
	for _, t := range tables {
		r.Tables = append(r.Tables, codersdk.PostgresTable{Schema: t.Schema, Name: t.Name, Rows: t.Rows, TotalBytes: t.TotalBytes, TableBytes: t.TableBytes, IndexBytes: t.IndexBytes})
	}
	c.JSON(http.StatusOK, r)
	return nil
}

// postgresSettingValue is what may be shown of a setting: nothing of one
// that can hold a secret (secretPostgresSettings, and an extension's
// setting named like a secret), the rest through redact.String.
func postgresSettingValue(name, value string) string {
	if value == "" {
		return ""
	}
	if secretPostgresSettings[name] || strings.Contains(name, ".") && redact.Key(name) {
		return redact.Mask
	}
	return redact.String(value)
}

// debugAppliance is GET /api/v2/debug/appliance: the appliance's overview
// in full, with the installed release's manifest (which GET
// /api/v2/appliance, for the dashboard, need not carry), and how the last
// upgrade ended. A plain coder server answers 404.
func (api *API) debugAppliance(c *gin.Context) error {
	if err := authorize(c, resAppliance, actRead, ""); err != nil {
		return err
	}
	if api.opts.Appliance == nil {
		return notFound("Appliance information (this deployment is a plain coder server, not an appliance)")
	}
	a, err := api.opts.Appliance(c.Request.Context())
	if err != nil {
		return err
	}
	if a.LastUpgrade, err = api.lastUpgrade(c); err != nil {
		return err
	}
	c.JSON(http.StatusOK, a)
	return nil
}
