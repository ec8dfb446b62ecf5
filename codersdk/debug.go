package codersdk

import (
	"context"
	"net/http"
	"time"
)

// The owners' diagnostics under /api/v2/debug, besides the health report
// (health.go): this replica's recent logs, its process and host, its
// PostgreSQL, and the appliance in full. `coder support bundle` writes
// each into its archive. None of them holds a password, token, PSK or
// private key.

// DebugLogs returns this replica's newest log lines, oldest first, as GET
// /api/v2/debug/logs serves them (owners; 404 when the server keeps
// none). Each line is one record, already redacted (package
// internal/logring).
func (c *Client) DebugLogs(ctx context.Context) ([]byte, error) {
	return c.getBytes(ctx, "/api/v2/debug/logs")
}

// SystemReport is GET /api/v2/debug/system (owners): the replica that
// answered, its process and its host.
type SystemReport struct {
	Time     time.Time `json:"time"`
	Hostname string    `json:"hostname"`
	// OS and Arch are the build's ("linux", "amd64").
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
	PID       int    `json:"pid"`
	// StartedAt is when the process started.
	StartedAt  time.Time     `json:"started_at"`
	Goroutines int           `json:"goroutines"`
	Process    ProcessMemory `json:"process_memory"`
	// HostMemory is /proc/meminfo's (nil where there is none).
	HostMemory *MemoryUse `json:"host_memory,omitempty"`
	// CgroupMemory is the process's cgroup's use and limit, the host's
	// total when it has none (nil outside Linux or without a memory
	// controller).
	CgroupMemory *MemoryUse `json:"cgroup_memory,omitempty"`
	// Errors name the figures that could not be read.
	Errors []string `json:"errors,omitempty"`
}

// ProcessMemory is the Go runtime's view of the process's memory
// (runtime.MemStats), in bytes.
type ProcessMemory struct {
	// Sys is all the memory the runtime holds from the OS.
	Sys        uint64 `json:"sys_bytes"`
	HeapAlloc  uint64 `json:"heap_alloc_bytes"`
	HeapInuse  uint64 `json:"heap_inuse_bytes"`
	HeapIdle   uint64 `json:"heap_idle_bytes"`
	StackInuse uint64 `json:"stack_inuse_bytes"`
	NumGC      uint32 `json:"num_gc"`
}

// MemoryUse is memory in use out of a total, in bytes.
type MemoryUse struct {
	Used  int64 `json:"used_bytes"`
	Total int64 `json:"total_bytes"`
}

// DebugSystem returns the answering replica's process and host figures
// (owners only).
func (c *Client) DebugSystem(ctx context.Context) (SystemReport, error) {
	return doJSON[SystemReport](ctx, c, http.MethodGet, "/api/v2/debug/system", nil)
}

// PostgresReport is GET /api/v2/debug/postgres (owners): the deployment's
// database server, its settings and its largest tables.
type PostgresReport struct {
	Time time.Time `json:"time"`
	// Version is version(); ServerVersion is server_version ("16.9").
	Version       string    `json:"version"`
	ServerVersion string    `json:"server_version"`
	StartedAt     time.Time `json:"started_at"`
	InRecovery    bool      `json:"in_recovery"`
	Database      string    `json:"database"`
	DatabaseSize  int64     `json:"database_size_bytes"`
	// Connections counts this database's backends by state ("active",
	// "idle", …).
	Connections map[string]int64 `json:"connections"`
	// Settings are pg_settings, by name; those that can hold a secret
	// (primary_conninfo, the *_command settings, …) are redacted.
	Settings []PostgresSetting `json:"settings"`
	// Tables are the largest tables, largest first.
	Tables []PostgresTable `json:"tables"`
}

// PostgresSetting is one row of pg_settings.
type PostgresSetting struct {
	Name    string `json:"name"`
	Setting string `json:"setting"`
	Unit    string `json:"unit,omitempty"`
	// Source is where the value comes from ("default", "configuration
	// file", "command line", …).
	Source string `json:"source"`
}

// PostgresTable is one table's size.
type PostgresTable struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	// Rows is an estimate (the statistics' live rows).
	Rows       int64 `json:"rows_estimate"`
	TotalBytes int64 `json:"total_bytes"`
	TableBytes int64 `json:"table_bytes"`
	IndexBytes int64 `json:"index_bytes"`
}

// DebugPostgres returns the database's settings and sizes (owners only).
func (c *Client) DebugPostgres(ctx context.Context) (PostgresReport, error) {
	return doJSON[PostgresReport](ctx, c, http.MethodGet, "/api/v2/debug/postgres", nil)
}

// DebugAppliance returns the appliance's overview in full (GET
// /api/v2/debug/appliance, owners; 404 on a plain coder server): what
// Appliance returns, and the installed release's manifest.
func (c *Client) DebugAppliance(ctx context.Context) (Appliance, error) {
	return doJSON[Appliance](ctx, c, http.MethodGet, "/api/v2/debug/appliance", nil)
}
