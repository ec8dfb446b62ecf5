package site

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"airgapcoder/codersdk"
)

// The admin pages: users, provisioner daemons and the audit log, for owners.
// The API decides what an owner may do; the pages only refuse other users
// up front, in words, instead of showing them a page of API errors.

// ownerOnly shows page to owners and a refusal to everyone else.
func (h *Handler) ownerOnly(next pageFunc) pageFunc {
	return func(w http.ResponseWriter, r *http.Request, s session) error {
		if !s.isOwner() {
			h.render(w, http.StatusForbidden, "error", page{Title: "Not allowed", User: &s.user,
				Error: "You are not allowed to see this page: the admin pages are for users with the owner role."})
			return nil
		}
		return next(w, r, s)
	}
}

// assignableRoles are the roles an owner can give on the users page
// (everyone is a member).
var assignableRoles = []codersdk.Role{
	{Name: codersdk.RoleOwner, DisplayName: "Owner"},
	{Name: codersdk.RoleTemplateAdmin, DisplayName: "Template admin"},
}

// adminUsers lists the users and handles its forms: create a user, change
// a user's roles, suspend or activate a user. A successful post redirects
// back with a notice.
func (h *Handler) adminUsers(w http.ResponseWriter, r *http.Request, s session) error {
	form := map[string]string{}
	var bad map[string]string
	var postErr string
	if r.Method == http.MethodPost && r.PostFormValue("action") == "suspend" && r.PostFormValue("confirm") != "yes" {
		// Suspending cuts a user off at once: ask first.
		http.Redirect(w, r, "/admin/users?confirm-suspend="+url.QueryEscape(r.PostFormValue("user")), http.StatusSeeOther)
		return nil
	}
	if r.Method == http.MethodPost {
		notice, err := h.postAdminUsers(r, s, form)
		if err == nil {
			http.Redirect(w, r, "/admin/users?notice="+url.QueryEscape(notice), http.StatusSeeOther)
			return nil
		}
		bad, postErr = validations(err), apiMessage(err)
	}
	res, err := s.client.Users(r.Context())
	if err != nil {
		return err
	}
	status := http.StatusOK
	if postErr != "" {
		status = http.StatusBadRequest
	}
	var confirm *codersdk.User
	for i, u := range res.Users {
		if id := r.URL.Query().Get("confirm-suspend"); id != "" && u.ID == id {
			confirm = &res.Users[i]
		}
	}
	h.render(w, status, "adminusers", page{Title: "Users", User: &s.user, Error: postErr, Data: map[string]any{
		"Users": res.Users, "Roles": assignableRoles, "Form": form, "Invalid": bad,
		"Notice": r.URL.Query().Get("notice"), "ConfirmSuspend": confirm,
	}})
	return nil
}

// postAdminUsers runs one form post of the users page and says what it did.
// form receives the create form's values, to fill it in again on an error.
func (h *Handler) postAdminUsers(r *http.Request, s session, form map[string]string) (string, error) {
	if err := r.ParseForm(); err != nil {
		return "", err
	}
	roles := r.PostForm["roles"]
	switch r.PostFormValue("action") {
	case "create":
		for _, k := range []string{"username", "email", "name"} {
			form[k] = r.PostFormValue(k)
		}
		for _, role := range roles {
			form["role."+role] = "true"
		}
		u, err := s.client.CreateUser(r.Context(), codersdk.CreateUserRequest{
			Username: r.PostFormValue("username"), Email: r.PostFormValue("email"), Name: r.PostFormValue("name"),
			Password: r.PostFormValue("password"), Roles: roles,
		})
		if err != nil {
			return "", err
		}
		return "Created user " + u.Username + ".", nil
	case "roles":
		if roles == nil {
			roles = []string{} // none: a plain member
		}
		u, err := s.client.UpdateUserRoles(r.Context(), url.PathEscape(r.PostFormValue("user")), roles)
		if err != nil {
			return "", err
		}
		return "Saved the roles of " + u.Username + ": " + roleList(u) + ".", nil
	case "suspend":
		u, err := s.client.SuspendUser(r.Context(), url.PathEscape(r.PostFormValue("user")))
		if err != nil {
			return "", err
		}
		return "Suspended " + u.Username + ": they cannot sign in, and their sessions and tokens are refused.", nil
	case "activate":
		u, err := s.client.ActivateUser(r.Context(), url.PathEscape(r.PostFormValue("user")))
		if err != nil {
			return "", err
		}
		return "Activated " + u.Username + ": they can sign in again.", nil
	}
	return "", &codersdk.Error{StatusCode: http.StatusBadRequest, Response: codersdk.Response{Message: "Unknown form action " + strconv.Quote(r.PostFormValue("action"))}}
}

func roleList(u codersdk.User) string {
	var names []string
	for _, r := range u.Roles {
		names = append(names, r.Name)
	}
	if len(names) == 0 {
		return "member"
	}
	return strings.Join(names, ", ")
}

func (h *Handler) adminProvisioners(w http.ResponseWriter, r *http.Request, s session) error {
	ds, err := s.client.ProvisionerDaemons(r.Context())
	if err != nil {
		return err
	}
	h.render(w, http.StatusOK, "adminprovisioners", page{Title: "Provisioners", User: &s.user, Data: ds})
	return nil
}

// adminReplicas lists the coderd replicas serving the deployment.
func (h *Handler) adminReplicas(w http.ResponseWriter, r *http.Request, s session) error {
	rs, err := s.client.Replicas(r.Context())
	if err != nil {
		return err
	}
	h.render(w, http.StatusOK, "adminreplicas", page{Title: "Replicas", User: &s.user, Data: rs})
	return nil
}

// adminAppliance shows the appliance: its release, components, what its
// mirror serves, its certificates, its disk and its last upgrade. A plain
// coder server has none, which the page says in words.
func (h *Handler) adminAppliance(w http.ResponseWriter, r *http.Request, s session) error {
	a, err := s.client.Appliance(r.Context())
	if codersdk.IsStatus(err, http.StatusNotFound) {
		h.render(w, http.StatusOK, "adminappliance", page{Title: "Appliance", User: &s.user})
		return nil
	}
	if err != nil {
		return err
	}
	h.render(w, http.StatusOK, "adminappliance", page{Title: "Appliance", User: &s.user, Data: a})
	return nil
}

// auditFilters are the audit page's filter fields, each a key of the API's
// search query q.
var auditFilters = []string{"username", "action", "resource_type", "workspace", "outcome", "since", "until"}

// auditPageSizes are the page sizes the audit page offers.
var auditPageSizes = []int{25, 50, 100, 500}

// auditRow is one audit record as the table shows it.
type auditRow struct {
	codersdk.AuditLog
	// Details is the record's additional fields as compact JSON, "" when
	// there are none.
	Details string
}

// adminAudit shows the audit log, filtered by the form's fields (sent as
// the API's q) and paged by limit and offset.
func (h *Handler) adminAudit(w http.ResponseWriter, r *http.Request, s session) error {
	q := r.URL.Query()
	filter := map[string]string{}
	var terms []string
	for _, k := range auditFilters {
		v := strings.Join(strings.Fields(q.Get(k)), "")
		if v != "" {
			filter[k] = v
			terms = append(terms, k+":"+v)
		}
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 {
		limit = 50
	}
	offset, _ := strconv.Atoi(q.Get("offset"))
	offset = max(offset, 0)
	query := strings.Join(terms, " ")
	data := map[string]any{
		"Filter": filter, "Query": query, "Limit": limit, "Sizes": auditPageSizes,
		"Actions": []codersdk.AuditAction{
			codersdk.AuditActionCreate, codersdk.AuditActionWrite, codersdk.AuditActionDelete,
			codersdk.AuditActionLogin, codersdk.AuditActionLogout, codersdk.AuditActionStart, codersdk.AuditActionStop,
			codersdk.AuditActionConnect, codersdk.AuditActionInstall, codersdk.AuditActionUpgrade,
			codersdk.AuditActionRollback, codersdk.AuditActionRestore,
		},
		"ResourceTypes": []codersdk.AuditResourceType{
			codersdk.AuditResourceUser, codersdk.AuditResourceAPIKey, codersdk.AuditResourceTemplate,
			codersdk.AuditResourceTemplateVersion, codersdk.AuditResourceWorkspace, codersdk.AuditResourceWorkspaceBuild,
			codersdk.AuditResourceWorkspaceAgent, codersdk.AuditResourceDeployment, codersdk.AuditResourceGroup,
		},
	}
	res, err := s.client.AuditLogs(r.Context(), codersdk.AuditLogsRequest{SearchQuery: query, Limit: limit, Offset: offset})
	if err != nil {
		// A filter the API refuses (a bad date, say) keeps the form.
		var e *codersdk.Error
		if !errors.As(err, &e) || e.StatusCode != http.StatusBadRequest {
			return err
		}
		h.render(w, http.StatusBadRequest, "adminaudit", page{Title: "Audit log", User: &s.user, Error: apiMessage(err), Data: data})
		return nil
	}
	rows := make([]auditRow, 0, len(res.AuditLogs))
	for _, l := range res.AuditLogs {
		rows = append(rows, auditRow{AuditLog: l, Details: auditDetails(l.AdditionalFields)})
	}
	pageURL := func(off int) string {
		v := url.Values{}
		for k, val := range filter {
			v.Set(k, val)
		}
		v.Set("limit", strconv.Itoa(limit))
		if off > 0 {
			v.Set("offset", strconv.Itoa(off))
		}
		return "/admin/audit?" + v.Encode()
	}
	data["Rows"] = rows
	data["Count"] = res.Count
	data["From"], data["To"] = offset+1, offset+len(rows)
	if offset > 0 {
		data["Newer"] = pageURL(max(offset-limit, 0))
	}
	if int64(offset+len(rows)) < res.Count {
		data["Older"] = pageURL(offset + len(rows))
	}
	h.render(w, http.StatusOK, "adminaudit", page{Title: "Audit log", User: &s.user, Data: data})
	return nil
}

// auditDetails is a record's additional fields as compact JSON.
func auditDetails(raw json.RawMessage) string {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return ""
	}
	b, err := json.Marshal(m) // sorted keys
	if err != nil {
		return ""
	}
	return string(b)
}
