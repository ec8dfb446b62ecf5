package coderd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// The audit log. A handler whose action is audited calls api.audit first
// thing, before any check that may refuse it, and fills in what it learns
// (the resource, the workspace, details). Then:
//
//   - an action done in a transaction runs it through auditEntry.inTx: the
//     record is the transaction's last insert, so the record and the action
//     commit together or not at all;
//   - anything else (a refusal, a failure, a success without a transaction)
//     is written by the auditRequests middleware right after the handler,
//     with the status the client was answered;
//   - relayed connections are written when they end (auditrelay.go).
//
// The source IP is the TCP peer's: coderd is reached directly (it serves
// TLS itself), so no X-Forwarded-For header is trusted.

const ctxAudit = "coderd.audit"

// statusClientClosed records a request whose client went away before it was
// answered (nginx's convention).
const statusClientClosed = 499

// auditEntry is the audit record of one request while its handler runs.
type auditEntry struct {
	api    *API
	row    database.AuditLog
	fields map[string]any
	// written: the record is stored (or will commit with the action's
	// transaction); skipped: this request is not recorded (a dev URL
	// request, whose relayed connection is recorded instead).
	written, skipped bool
	writer           *auditWriter
	restore          gin.ResponseWriter
}

// audit starts the audit record of the request: the actor (when signed in),
// source IP and user agent, the action and the resource type. A request
// the middleware declared already (a login) gets its entry back.
func (api *API) audit(c *gin.Context, action codersdk.AuditAction, res codersdk.AuditResourceType) *auditEntry {
	if v, ok := c.Get(ctxAudit); ok {
		e := v.(*auditEntry)
		e.row.Action, e.row.ResourceType = string(action), string(res)
		return e
	}
	e := &auditEntry{api: api, fields: map[string]any{}, row: database.AuditLog{
		IP: sourceIP(c.Request), UserAgent: c.Request.UserAgent(), Action: string(action), ResourceType: string(res),
	}}
	if u, ok := c.Get(ctxUser); ok {
		e.actor(u.(database.User))
	}
	e.restore = c.Writer
	e.writer = &auditWriter{ResponseWriter: c.Writer}
	c.Writer = e.writer
	c.Set(ctxAudit, e)
	return e
}

// An action on a resource the request's path names (a template, a user, a
// group) is recorded against it: by the path's value at once, then by its
// id and name once loaded, so that a refusal, or a request for a resource
// that is not there, is recorded against what was asked for. The caller
// checks the error after these return; the entry is there either way.

// auditTemplate starts the record of action on the :template and loads it
// with load (templateAdminParam, or templateParam for an action).
func (api *API) auditTemplate(c *gin.Context, action codersdk.AuditAction, load func(*gin.Context) (database.Template, error)) (*auditEntry, database.Template, error) {
	e := api.audit(c, action, codersdk.AuditResourceTemplate).resource(c.Param("template"), "")
	t, err := load(c)
	e.resource(t.ID, t.Name)
	return e, t, err
}

// auditUser starts the record of action on the :user and loads the user
// (userParam); what the caller may do to the user is the caller's to check.
func (api *API) auditUser(c *gin.Context, action codersdk.AuditAction) (*auditEntry, database.User, error) {
	e := api.audit(c, action, codersdk.AuditResourceUser).resource(c.Param("user"), "")
	u, err := api.userParam(c)
	e.resource(u.ID, u.Username)
	return e, u, err
}

// auditGroup starts the record of action on the :group and loads the
// group (groupParam); what the caller may do to the group is the caller's
// to check.
func (api *API) auditGroup(c *gin.Context, action codersdk.AuditAction) (*auditEntry, database.Group, error) {
	e := api.audit(c, action, codersdk.AuditResourceGroup).resource(c.Param("group"), "")
	g, err := api.groupParam(c)
	e.resource(g.ID, g.Name)
	return e, g, err
}

func (e *auditEntry) actor(u database.User) *auditEntry {
	e.row.UserID, e.row.Username = u.ID, u.Username
	return e
}

// resource names the record's resource (empty values leave it as it was).
func (e *auditEntry) resource(id, target string) *auditEntry {
	if id != "" {
		e.row.ResourceID = id
	}
	if target != "" {
		e.row.ResourceTarget = target
	}
	return e
}

// workspace names the workspace the action touches.
func (e *auditEntry) workspace(owner, name string) *auditEntry {
	e.row.WorkspaceOwner, e.row.WorkspaceName = owner, name
	return e
}

// workspaceOf names w as the record's workspace; a workspace that was not
// found (zero) leaves the record as it was.
func (e *auditEntry) workspaceOf(w database.Workspace) *auditEntry {
	if w.ID == "" {
		return e
	}
	e.workspace(w.OwnerName, w.Name)
	if e.row.ResourceType == string(codersdk.AuditResourceWorkspace) {
		return e.resource(w.ID, w.Name)
	}
	return e.resource("", w.Name)
}

func (e *auditEntry) field(key string, value any) *auditEntry {
	e.fields[key] = value
	return e
}

func (e *auditEntry) setAction(a codersdk.AuditAction) *auditEntry {
	e.row.Action = string(a)
	return e
}

// skip leaves the request out of the audit log.
func (e *auditEntry) skip(c *gin.Context) {
	e.skipped = true
	c.Writer = e.restore
}

// record is the row to store for an answer with status.
func (e *auditEntry) record(status int) database.AuditLog {
	row := e.row
	row.StatusCode = status
	row.Success = status > 0 && status < http.StatusBadRequest
	fields := e.fields
	if msg := e.writer.errorMessage(); !row.Success && msg != "" {
		fields = map[string]any{"error": msg}
		for k, v := range e.fields {
			fields[k] = v
		}
	}
	row.AdditionalFields, _ = json.Marshal(fields)
	row.Description = describe(row)
	return row
}

// describe says in a few words what a record records.
func describe(row database.AuditLog) string {
	s := row.Action + " " + row.ResourceType
	if row.ResourceTarget != "" {
		s += " " + row.ResourceTarget
	}
	if !row.Success {
		text := http.StatusText(row.StatusCode)
		if row.StatusCode == statusClientClosed {
			text = "Client Closed Request"
		}
		s += fmt.Sprintf(" (refused or failed: %d %s)", row.StatusCode, text)
	}
	return s
}

// inTx runs fn in a transaction that ends with the insert of the record
// (as a success with status): both commit, or neither does.
func (e *auditEntry) inTx(ctx context.Context, status int, fn func(tx *database.DB) error) error {
	err := e.api.db.InTx(ctx, func(tx *database.DB) error {
		if err := fn(tx); err != nil {
			return err
		}
		_, err := tx.InsertAuditLog(ctx, e.record(status))
		return err
	})
	if err == nil {
		e.written = true
	}
	return err
}

// write stores the record now, as answered with status. A record that
// cannot be stored is logged with everything it holds, so it is not lost
// silently.
func (e *auditEntry) write(ctx context.Context, status int) {
	e.written = true
	e.api.writeAudit(ctx, e.record(status))
}

func (api *API) writeAudit(ctx context.Context, row database.AuditLog) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := api.db.InsertAuditLog(ctx, row); err != nil {
		api.log.Error("write audit record", "err", err, "action", row.Action, "resource_type", row.ResourceType,
			"resource", row.ResourceTarget, "user", row.Username, "ip", row.IP, "status", row.StatusCode, "fields", string(row.AdditionalFields))
	}
}

// auditRequests is middleware that writes the record of an audited request
// its handler did not write itself, with the status it was answered.
//
// Logins are declared here, before the handler chain: the login rate limit
// may refuse one (429) before the handler runs, and that refusal is
// recorded too.
func (api *API) auditRequests() gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.Method == http.MethodPost && c.FullPath() == "/api/v2/users/login" {
			api.audit(c, codersdk.AuditActionLogin, codersdk.AuditResourceUser)
		}
		panicked := true
		defer func() {
			v, ok := c.Get(ctxAudit)
			if !ok {
				return
			}
			e := v.(*auditEntry)
			if e.written || e.skipped {
				return
			}
			status := c.Writer.Status()
			switch {
			case panicked:
				status = http.StatusInternalServerError
			case !c.Writer.Written() && c.Request.Context().Err() != nil:
				status = statusClientClosed
			}
			e.write(c.Request.Context(), status)
		}()
		c.Next()
		panicked = false
	}
}

// sourceIP is the address of the request's TCP peer, "" when it has none.
func sourceIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return ""
	}
	return a.WithZone("").Unmap().String()
}

// auditWriter keeps the start of an error answer, for the record's error
// message.
type auditWriter struct {
	gin.ResponseWriter
	body []byte
}

const auditErrorBody = 4 << 10

func (w *auditWriter) keep(p []byte) {
	if w.Status() >= http.StatusBadRequest && len(w.body) < auditErrorBody {
		w.body = append(w.body, p[:min(len(p), auditErrorBody-len(w.body))]...)
	}
}

func (w *auditWriter) Write(p []byte) (int, error) {
	w.keep(p)
	return w.ResponseWriter.Write(p)
}

func (w *auditWriter) WriteString(s string) (int, error) {
	w.keep([]byte(s))
	return w.ResponseWriter.WriteString(s)
}

// errorMessage is the message of the error envelope answered, if any.
func (w *auditWriter) errorMessage() string {
	if w == nil || len(w.body) == 0 {
		return ""
	}
	var r codersdk.Response
	if json.Unmarshal(w.body, &r) != nil {
		return ""
	}
	return r.Message
}
