package coderd

import (
	"context"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Relayed connections in the audit log: one record per connection, written
// when it ends, with its kind (ssh, tcp, dev-url), target port, bytes each
// way and duration. A user WebSocket (coder ssh, coder port-forward) is one
// connection; a dev URL's connection is one relay stream of the dev URL
// transport, which may carry several requests of the same user (the
// transport pools connections per user, so a record never mixes users).
// Refused attempts are recorded by the request's own entry (audit.go).

// agent names a's workspace and a as the record's workspace and resource;
// an agent that was not found (zero) leaves the record as it was.
func (e *auditEntry) agent(a database.WorkspaceAgent) *auditEntry {
	if a.ID == "" {
		return e
	}
	return e.workspace(a.OwnerName, a.WorkspaceName).resource(a.ID, a.OwnerName+"/"+a.WorkspaceName+"."+a.Name)
}

// connFields are the fields of a relayed connection's record.
func connFields(kind, host string, port uint16, connID string, began time.Time, toAgent, fromAgent int64) map[string]any {
	f := map[string]any{
		"kind": kind, "port": port, "conn_id": connID, "started_at": began.UTC().Format(time.RFC3339Nano),
		"duration_ms": time.Since(began).Milliseconds(), "bytes_to_agent": toAgent, "bytes_from_agent": fromAgent,
	}
	if host != "" {
		f["host"] = host
	}
	return f
}

// auditRelayed writes the record of a user WebSocket relayed to the agent,
// once it has ended.
func (api *API) auditRelayed(ctx context.Context, e *auditEntry, hdr codersdk.RelayHeader, began time.Time, toAgent, fromAgent int64) {
	maps.Copy(e.fields, connFields(hdr.Kind, hdr.Host, hdr.Port, hdr.ConnID, began, toAgent, fromAgent))
	e.write(ctx, http.StatusSwitchingProtocols)
}

// connAudit is the audit record of a request that opens connections later
// (a dev URL request hands it to its transport's dials; a prepared relay
// connection keeps it until its target comes): each connection's record is
// a copy.
type connAudit struct {
	row    database.AuditLog
	fields map[string]any
}

// connAuditOf returns the audit record of the request and leaves the
// request itself out of the log: its connections are recorded instead.
func connAuditOf(c *gin.Context) *connAudit {
	v, ok := c.Get(ctxAudit)
	if !ok {
		return nil
	}
	e := v.(*auditEntry)
	e.skip(c)
	return &connAudit{row: e.row, fields: maps.Clone(e.fields)}
}

// entry is a new record for one connection, a copy of the request's.
func (a *connAudit) entry(api *API) *auditEntry {
	row := a.row
	row.Time = time.Time{}
	return &auditEntry{api: api, row: row, fields: maps.Clone(a.fields)}
}

// auditDevURLConn returns conn counting its bytes; closing it writes the
// connection's record.
func (api *API) auditDevURLConn(conn net.Conn, a *connAudit, hdr codersdk.RelayHeader) net.Conn {
	if a == nil {
		return conn
	}
	began := time.Now()
	return &auditedConn{Conn: conn, ended: func(toAgent, fromAgent int64) {
		e := a.entry(api)
		maps.Copy(e.fields, connFields("dev-url", hdr.Host, hdr.Port, hdr.ConnID, began, toAgent, fromAgent))
		api.log.Info("relay connection closed", "conn", hdr.ConnID, "user", e.row.Username, "workspace", e.row.WorkspaceOwner+"/"+e.row.WorkspaceName,
			"kind", "dev-url", "port", hdr.Port, "bytes_to_agent", toAgent, "bytes_from_agent", fromAgent, "duration", time.Since(began).Round(time.Millisecond))
		e.write(context.Background(), http.StatusOK)
	}}
}

// auditedConn counts the bytes of a relayed connection and reports them
// once, when it is closed. Reads and writes hold mu shared, so that the
// report, taken after the connection is closed (which ends them), counts
// every byte they moved.
type auditedConn struct {
	net.Conn
	mu                 sync.RWMutex
	toAgent, fromAgent atomic.Int64
	once               sync.Once
	ended              func(toAgent, fromAgent int64)
}

func (c *auditedConn) Read(p []byte) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, err := c.Conn.Read(p)
	c.fromAgent.Add(int64(n))
	return n, err
}

func (c *auditedConn) Write(p []byte) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, err := c.Conn.Write(p)
	c.toAgent.Add(int64(n))
	return n, err
}

func (c *auditedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.mu.Lock()
		to, from := c.toAgent.Load(), c.fromAgent.Load()
		c.mu.Unlock()
		c.ended(to, from)
	})
	return err
}
