package site

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"airgapcoder/coderd/schedule"
	"airgapcoder/codersdk"
)

func (h *Handler) setup(w http.ResponseWriter, r *http.Request) error {
	c := h.client(r, "")
	exists, err := c.HasFirstUser(r.Context())
	if err != nil {
		return err
	}
	if exists {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return nil
	}
	form := map[string]any{"Email": r.FormValue("email"), "Username": r.FormValue("username"), "PasswordEnabled": true}
	if m, err := c.AuthMethods(r.Context()); err == nil {
		form["PasswordEnabled"] = m.Password.Enabled
	}
	if r.Method != http.MethodPost {
		h.render(w, http.StatusOK, "setup", page{Title: "Set up", Data: form})
		return nil
	}
	_, err = c.CreateFirstUser(r.Context(), codersdk.CreateFirstUserRequest{
		Email: r.FormValue("email"), Username: r.FormValue("username"), Password: r.FormValue("password"),
	})
	if err != nil {
		h.render(w, http.StatusBadRequest, "setup", page{Title: "Set up", Error: apiMessage(err), Data: form})
		return nil
	}
	return h.signIn(w, r, r.FormValue("email"), r.FormValue("password"), "/workspaces", "setup", form)
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) error {
	form := map[string]any{"Email": r.FormValue("email"), "Redirect": r.FormValue("redirect"), "Message": r.URL.Query().Get("message"), "Password": true}
	if m, err := h.client(r, "").AuthMethods(r.Context()); err == nil {
		form["Password"] = m.Password.Enabled
		if m.OIDC.Enabled {
			// The callback checks the redirect again (site.LocalRedirect).
			q := url.Values{"redirect": {LocalRedirect(r.FormValue("redirect"))}}
			form["OIDC"] = map[string]string{"Text": m.OIDC.SignInText, "URL": codersdk.OIDCCallbackPath + "?" + q.Encode()}
		}
	}
	if r.Method != http.MethodPost {
		if exists, err := h.client(r, "").HasFirstUser(r.Context()); err == nil && !exists {
			http.Redirect(w, r, "/setup", http.StatusSeeOther)
			return nil
		}
		h.render(w, http.StatusOK, "login", page{Title: "Sign in", Data: form})
		return nil
	}
	return h.signIn(w, r, r.FormValue("email"), r.FormValue("password"), r.FormValue("redirect"), "login", form)
}

// cliAuth shows a signed-in user a new session token for `coder login`
// (Coder's /cli-auth). The token is created by a POST, so a page a
// visitor is lured to cannot mint one.
func (h *Handler) cliAuth(w http.ResponseWriter, r *http.Request, s session) error {
	data := map[string]string{}
	if r.Method == http.MethodPost {
		res, err := s.client.CreateToken(r.Context(), codersdk.Me, codersdk.CreateTokenRequest{TokenName: "cli-" + strconv.FormatInt(time.Now().UnixNano(), 36)})
		if err != nil {
			return err
		}
		data["Token"] = res.Key
	}
	h.render(w, http.StatusOK, "cliauth", page{Title: "CLI sign-in", User: &s.user, Data: data})
	return nil
}

// signIn logs in through the API's login and passes its session cookie on.
func (h *Handler) signIn(w http.ResponseWriter, r *http.Request, email, password, redirect, tmpl string, form map[string]any) error {
	res, err := h.client(r, "").Request(r.Context(), http.MethodPost, "/api/v2/users/login",
		codersdk.LoginWithPasswordRequest{Email: email, Password: password})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		// A refusal of the login limits (429) says when to retry.
		if v := res.Header.Get("Retry-After"); v != "" {
			w.Header().Set("Retry-After", v)
		}
		h.render(w, res.StatusCode, tmpl, page{Title: "Sign in", Error: apiMessage(codersdk.ReadBodyAsError(res)), Data: form})
		return nil
	}
	forwardCookies(w, res)
	http.Redirect(w, r, LocalRedirect(redirect), http.StatusSeeOther)
	return nil
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		http.Error(w, "Sign out with the button (POST)", http.StatusMethodNotAllowed)
		return nil
	}
	if c, err := r.Cookie(codersdk.SessionTokenCookie); err == nil {
		res, err := h.client(r, c.Value).Request(r.Context(), http.MethodPost, "/api/v2/users/logout", nil)
		if err != nil {
			return err
		}
		res.Body.Close()
		forwardCookies(w, res)
	}
	http.Redirect(w, r, "/login?message="+url.QueryEscape("You are signed out."), http.StatusSeeOther)
	return nil
}

func (h *Handler) workspaces(w http.ResponseWriter, r *http.Request, s session) error {
	res, err := s.client.Workspaces(r.Context(), codersdk.WorkspaceFilter{})
	if err != nil {
		return err
	}
	templates, err := s.client.Templates(r.Context(), "default")
	if err != nil {
		return err
	}
	h.render(w, http.StatusOK, "workspaces", page{Title: "Workspaces", User: &s.user, Data: map[string]any{
		"Workspaces": res.Workspaces, "Templates": templates, "ShowOwner": s.isOwner(),
	}})
	return nil
}

func (h *Handler) templates(w http.ResponseWriter, r *http.Request, s session) error {
	ts, err := s.client.Templates(r.Context(), "default")
	if err != nil {
		return err
	}
	type row struct {
		codersdk.Template
		Active codersdk.TemplateVersion
	}
	rows := make([]row, 0, len(ts))
	for _, t := range ts {
		v, err := s.client.TemplateVersion(r.Context(), t.ActiveVersionID)
		if err != nil {
			return err
		}
		rows = append(rows, row{t, v})
	}
	h.render(w, http.StatusOK, "templates", page{Title: "Templates", User: &s.user, Data: rows})
	return nil
}

// param is one coder_parameter on the create form.
type param struct {
	codersdk.TemplateVersionParameter
	Value string
	Error string
}

func (h *Handler) newWorkspace(w http.ResponseWriter, r *http.Request, s session) error {
	name := r.FormValue("template")
	if name == "" {
		http.Redirect(w, r, "/templates", http.StatusSeeOther)
		return nil
	}
	t, err := s.client.TemplateByName(r.Context(), "default", name)
	if err != nil {
		return err
	}
	v, err := s.client.TemplateVersion(r.Context(), t.ActiveVersionID)
	if err != nil {
		return err
	}
	params := make([]param, 0, len(v.Parameters))
	var values []codersdk.WorkspaceBuildParameter
	for _, p := range v.Parameters {
		val := p.DefaultValue
		if r.Method == http.MethodPost {
			switch {
			case p.Type == codersdk.ParameterTypeBool:
				val = strconv.FormatBool(r.FormValue("param."+p.Name) == "true")
			case p.Type == codersdk.ParameterTypeListString:
				vs := r.Form["param."+p.Name]
				if len(vs) == 1 && strings.HasPrefix(vs[0], "[") {
					val = vs[0]
				} else {
					b, _ := json.Marshal(append([]string{}, vs...))
					val = string(b)
				}
			default:
				val = r.FormValue("param." + p.Name)
			}
			values = append(values, codersdk.WorkspaceBuildParameter{Name: p.Name, Value: val})
		}
		params = append(params, param{TemplateVersionParameter: p, Value: val})
	}
	data := map[string]any{"Template": t, "Version": v, "Params": params, "Name": r.FormValue("name")}
	data["ExternalAuth"] = h.externalAuthLinks(r, s, v.ID, "/workspaces/new?"+url.Values{"template": {t.Name}}.Encode())
	if r.Method != http.MethodPost {
		h.render(w, http.StatusOK, "new", page{Title: "New workspace", User: &s.user, Data: data})
		return nil
	}
	ws, err := s.client.CreateWorkspace(r.Context(), codersdk.Me, codersdk.CreateWorkspaceRequest{
		TemplateID: t.ID, Name: r.FormValue("name"), RichParameterValues: values,
	})
	if err != nil {
		bad := validations(err)
		for i := range params {
			params[i].Error = bad[params[i].Name]
			if params[i].Error == "" {
				params[i].Error = bad["rich_parameter_values."+params[i].Name]
			}
		}
		data["NameError"] = bad["name"]
		h.render(w, http.StatusBadRequest, "new", page{Title: "New workspace", User: &s.user, Error: apiMessage(err), Data: data})
		return nil
	}
	http.Redirect(w, r, "/@"+url.PathEscape(ws.OwnerName)+"/"+url.PathEscape(ws.Name), http.StatusSeeOther)
	return nil
}

// ownerAndName splits /@owner/workspace[/...].
func ownerAndName(path string) (string, string) {
	parts := strings.SplitN(strings.TrimPrefix(path, "/@"), "/", 3)
	if len(parts) < 2 {
		return "", ""
	}
	return parts[0], parts[1]
}

// workspaceAt looks up the workspace a /@owner/name… path names. A
// workspace the visitor may not see is "not found", like one that does not
// exist, whatever the API's reason (a member may not even look up another
// user): the page confirms nothing about other users' workspaces.
func (h *Handler) workspaceAt(r *http.Request, s session) (codersdk.Workspace, error) {
	owner, name := ownerAndName(r.URL.Path)
	ws, err := s.client.WorkspaceByOwnerAndName(r.Context(), owner, name)
	if codersdk.IsStatus(err, http.StatusForbidden) || codersdk.IsStatus(err, http.StatusNotFound) {
		return ws, &codersdk.Error{StatusCode: http.StatusNotFound, Response: codersdk.Response{
			Message: fmt.Sprintf("Workspace %s/%s not found, or not yours to see", owner, name)}}
	}
	return ws, err
}

func (h *Handler) workspace(w http.ResponseWriter, r *http.Request, s session) error {
	ws, err := h.workspaceAt(r, s)
	if err != nil {
		return err
	}
	regions := regionChoices(r, s.client) // regions.go
	allowRegions(w, regions)
	h.render(w, http.StatusOK, "workspace", page{Title: ws.OwnerName + "/" + ws.Name, User: &s.user, Error: r.URL.Query().Get("error"),
		Data: map[string]any{"W": ws, "Base": "/@" + url.PathEscape(ws.OwnerName) + "/" + url.PathEscape(ws.Name), "Can": actionsFor(ws),
			"AppBase": appBase(r, s.client), "NoWildcard": noWildcardReason, "Schedule": scheduleFacts(ws), "Regions": regions}})
	return nil
}

// scheduleFacts are the workspace page's schedule lines (issue 35): its
// autostart, its autostop after start or last use, the running build's
// deadline, and dormancy; none for a workspace without any.
func scheduleFacts(ws codersdk.Workspace) []string {
	var out []string
	if ws.AutostartSchedule != nil {
		start := *ws.AutostartSchedule
		if sched, err := schedule.Weekly(start); err == nil {
			start = sched.Human()
		}
		out = append(out, "Starts "+start)
	}
	if ws.TTLMillis != nil {
		out = append(out, fmt.Sprintf("Stops %s after it starts or was last used", time.Duration(*ws.TTLMillis)*time.Millisecond))
	}
	if d := ws.LatestBuild.Deadline; d != nil && ws.LatestBuild.Status == codersdk.WorkspaceStatusRunning {
		out = append(out, "Stops at "+d.UTC().Format("2006-01-02 15:04 MST")+" unless used")
	}
	if ws.DormantAt != nil {
		line := "Dormant since " + ws.DormantAt.UTC().Format("2006-01-02 15:04 MST")
		if ws.DeletingAt != nil {
			line += "; deleted at " + ws.DeletingAt.UTC().Format("2006-01-02 15:04 MST") + " unless made active"
		}
		out = append(out, line)
	}
	return out
}

// actions says which of the workspace page's build buttons apply to the
// workspace's state. live.js applies the same rules (buttons()) as the
// status changes; keep the two in step.
type actions struct {
	Start, Stop bool
	// ShowCancel is true while a build runs; Cancel is false once its
	// cancellation was asked for.
	ShowCancel, Cancel bool
	// ShowUpdate is true when the template's active version is not the one
	// the latest build used; Update is false while a build runs.
	ShowUpdate, Update bool
}

func actionsFor(ws codersdk.Workspace) actions {
	var a actions
	switch ws.LatestBuild.Status {
	case codersdk.WorkspaceStatusRunning:
		a.Stop = true
	case codersdk.WorkspaceStatusStopped:
		a.Start = true
	case codersdk.WorkspaceStatusFailed, codersdk.WorkspaceStatusCanceled:
		a.Start, a.Stop = true, true
	case codersdk.WorkspaceStatusPending, codersdk.WorkspaceStatusStarting, codersdk.WorkspaceStatusStopping, codersdk.WorkspaceStatusDeleting:
		a.ShowCancel, a.Cancel = true, true
	case codersdk.WorkspaceStatusCanceling:
		a.ShowCancel = true
	}
	if ws.Outdated && ws.LatestBuild.Status != codersdk.WorkspaceStatusDeleted {
		a.ShowUpdate, a.Update = true, !a.ShowCancel
	}
	return a
}

// postBuild starts, stops, updates or deletes a workspace (delete needs its
// name typed again), or cancels its running build. Update is `coder update`
// without prompts: a start build on the template's active version, the API
// carrying the latest build's parameter values over (it refuses, in words,
// when the new version needs a value the old one had no parameter for).
func (h *Handler) postBuild(w http.ResponseWriter, r *http.Request, s session) error {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return nil
	}
	owner, name := ownerAndName(r.URL.Path)
	base := "/@" + url.PathEscape(owner) + "/" + url.PathEscape(name)
	ws, err := h.workspaceAt(r, s)
	if err != nil {
		return err
	}
	tr := codersdk.WorkspaceTransition(r.FormValue("transition"))
	if tr == codersdk.WorkspaceTransitionDelete && r.FormValue("confirm") != ws.Name {
		http.Redirect(w, r, base+"?error="+url.QueryEscape("Type the workspace's name ("+ws.Name+") to confirm deleting it."), http.StatusSeeOther)
		return nil
	}
	req := codersdk.CreateWorkspaceBuildRequest{Transition: tr}
	switch r.FormValue("transition") {
	case "cancel":
		err = s.client.CancelWorkspaceBuild(r.Context(), ws.LatestBuild.ID)
	case "update":
		req = codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart, TemplateVersionID: ws.TemplateActiveVersionID}
		fallthrough
	default:
		_, err = s.client.CreateWorkspaceBuild(r.Context(), ws.ID, req)
	}
	if err != nil {
		http.Redirect(w, r, base+"?error="+url.QueryEscape(apiMessage(err)), http.StatusSeeOther)
		return nil
	}
	http.Redirect(w, r, base, http.StatusSeeOther)
	return nil
}

func (h *Handler) terminal(w http.ResponseWriter, r *http.Request, s session) error {
	ws, err := h.workspaceAt(r, s)
	if err != nil {
		return err
	}
	var agent *codersdk.WorkspaceAgent
	for _, res := range ws.LatestBuild.Resources {
		for i := range res.Agents {
			if agent == nil || res.Agents[i].Name == r.URL.Query().Get("agent") {
				agent = &res.Agents[i]
			}
		}
	}
	if agent == nil {
		return &codersdk.Error{StatusCode: http.StatusNotFound, Response: codersdk.Response{Message: "Workspace " + ws.Name + " has no agent; start it first"}}
	}
	h.render(w, http.StatusOK, "terminal", page{Title: "Terminal · " + ws.Name, User: &s.user,
		Data: map[string]any{"W": ws, "Agent": agent, "Base": "/@" + url.PathEscape(ws.OwnerName) + "/" + url.PathEscape(ws.Name)}})
	return nil
}
