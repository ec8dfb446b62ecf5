package site

import (
	"net/http"
	"net/url"
	"strings"

	"airgapcoder/codersdk"
)

// The external auth page (issue 33), at codersdk.ExternalAuthPagePath(id):
// whether the visitor has linked their account at one provider, with
// "Connect" (the API's link flow, which ends back here) or "Unlink". It is
// the URL a workspace prints when git needs a provider not linked yet.

// externalAuthID is the provider ID of an /external-auth/{id} path; ok is
// false for any other path (the flow's /external-auth/{id}/callback is
// coderd's).
func externalAuthID(path string) (string, bool) {
	id, ok := strings.CutPrefix(path, "/external-auth/")
	return id, ok && id != "" && !strings.Contains(id, "/")
}

// externalAuthConnectURL starts the link flow of provider id and comes
// back to redirect (a local path) when it is done.
func externalAuthConnectURL(id, redirect string) string {
	u := codersdk.ExternalAuthCallbackPath(id)
	if redirect != "" {
		u += "?" + url.Values{"redirect": {redirect}}.Encode()
	}
	return u
}

// externalAuth shows the page, and unlinks on a POST (action=unlink).
func (h *Handler) externalAuth(w http.ResponseWriter, r *http.Request, s session) error {
	id, _ := externalAuthID(r.URL.Path)
	if r.Method == http.MethodPost {
		if r.PostFormValue("action") == "unlink" {
			if err := s.client.UnlinkExternalAuth(r.Context(), id); err != nil && !codersdk.IsStatus(err, http.StatusNotFound) {
				return err
			}
		}
		http.Redirect(w, r, codersdk.ExternalAuthPagePath(id), http.StatusSeeOther)
		return nil
	}
	ea, err := s.client.ExternalAuthByID(r.Context(), id)
	if err != nil {
		return err
	}
	data := map[string]any{
		"ID": id, "Auth": ea, "ConnectURL": externalAuthConnectURL(id, ""), "PagePath": codersdk.ExternalAuthPagePath(id),
	}
	h.render(w, http.StatusOK, "externalauth", page{Title: ea.DisplayName, User: &s.user, Data: data})
	return nil
}

// externalAuthList is /external-auth: every provider the deployment
// configures, and whether the visitor has linked it.
func (h *Handler) externalAuthList(w http.ResponseWriter, r *http.Request, s session) error {
	list, err := s.client.ListExternalAuths(r.Context())
	if err != nil {
		return err
	}
	linked := map[string]bool{}
	for _, l := range list.Links {
		linked[l.ProviderID] = l.Authenticated
	}
	type row struct {
		codersdk.ExternalAuthLinkProvider
		Linked   bool
		PagePath string
	}
	rows := []row{}
	for _, p := range list.Providers {
		rows = append(rows, row{ExternalAuthLinkProvider: p, Linked: linked[p.ID], PagePath: codersdk.ExternalAuthPagePath(p.ID)})
	}
	h.render(w, http.StatusOK, "externalauths", page{Title: "External auth", User: &s.user, Data: rows})
	return nil
}

// externalAuthLinks are the "Connect" links of the providers a template
// version requires and the visitor has not linked, each coming back to
// redirect; a version that cannot be asked yields none (the create
// request's refusal then says what is missing).
func (h *Handler) externalAuthLinks(r *http.Request, s session, versionID, redirect string) []externalAuthLink {
	list, err := s.client.TemplateVersionExternalAuth(r.Context(), versionID)
	if err != nil {
		h.log.Debug("list the template version's external auth", "version", versionID, "err", err)
		return nil
	}
	var out []externalAuthLink
	for _, p := range list {
		if !p.Authenticated {
			out = append(out, externalAuthLink{ID: p.ID, DisplayName: p.DisplayName, URL: externalAuthConnectURL(p.ID, redirect), Optional: p.Optional})
		}
	}
	return out
}

// externalAuthLink is a "Connect" link of the workspace create page.
type externalAuthLink struct {
	ID, DisplayName, URL string
	Optional             bool
}
