package site

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"airgapcoder/codersdk"
)

// The template pages: /templates/NAME (versions, the active version, its
// import log, the provisioner tags it needs and whether a daemon that
// matches them is online) and /templates/NAME/versions/VERSION (one
// version's import job and log).

// templatePath splits /templates/NAME[/versions/VERSION]; ok is false for
// any other path.
func templatePath(path string) (name, version string, ok bool) {
	rest, found := strings.CutPrefix(path, "/templates/")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return "", "", false
		}
	}
	switch {
	case len(parts) == 1:
		return parts[0], "", true
	case len(parts) == 3 && parts[1] == "versions":
		return parts[0], parts[2], true
	}
	return "", "", false
}

// versionRow is a template version in the versions table.
type versionRow struct {
	codersdk.TemplateVersion
	Active bool
}

// provisionerCheck says whether a daemon that can take the template's jobs
// is online.
type provisionerCheck struct {
	// Hidden: the visitor may not list provisioner daemons (members).
	Hidden bool
	// Online are the names of the matching daemons seen recently.
	Online []string
	// Offline are the names of matching daemons not seen recently.
	Offline []string
}

func (h *Handler) templatePage(w http.ResponseWriter, r *http.Request, s session) error {
	name, version, ok := templatePath(r.URL.Path)
	if !ok {
		return &codersdk.Error{StatusCode: http.StatusNotFound, Response: codersdk.Response{Message: "No page " + r.URL.Path}}
	}
	ctx := r.Context()
	t, err := s.client.TemplateByName(ctx, "default", url.PathEscape(name))
	if err != nil {
		return err
	}
	vs, err := s.client.TemplateVersionsByTemplate(ctx, t.ID)
	if err != nil {
		return err
	}
	rows := make([]versionRow, 0, len(vs))
	var shown *codersdk.TemplateVersion
	for i, v := range vs { // newest first, as the API lists them
		rows = append(rows, versionRow{TemplateVersion: v, Active: v.ID == t.ActiveVersionID})
		if (version == "" && v.ID == t.ActiveVersionID) || (version != "" && v.Name == version) {
			shown = &vs[i]
		}
	}
	if shown == nil && version != "" {
		return &codersdk.Error{StatusCode: http.StatusNotFound, Response: codersdk.Response{
			Message: "Template " + t.Name + " has no version named " + version}}
	}
	if shown == nil {
		active, err := s.client.TemplateVersion(ctx, t.ActiveVersionID)
		if err != nil {
			return err
		}
		shown = &active
	}
	var logs []codersdk.ProvisionerJobLog
	logErr := s.client.TemplateVersionLogs(ctx, shown.ID, 0, false, func(l codersdk.ProvisionerJobLog) error {
		logs = append(logs, l)
		return nil
	})
	check, err := h.matchProvisioners(r, s, shown.Job.Tags)
	if err != nil {
		return err
	}
	data := map[string]any{
		"T": t, "Versions": rows, "V": *shown, "Log": logText(logs), "Provisioners": check,
		"Active": shown.ID == t.ActiveVersionID, "Base": "/templates/" + url.PathEscape(t.Name),
		"VersionPage": version != "",
	}
	p := page{Title: or(t.DisplayName, t.Name), User: &s.user, Data: data}
	if logErr != nil {
		p.Error = "The import log could not be read: " + apiMessage(logErr)
	}
	if version != "" {
		p.Title += " · " + shown.Name
	}
	h.render(w, http.StatusOK, "templatepage", p)
	return nil
}

// matchProvisioners finds the daemons that can take jobs carrying tags.
func (h *Handler) matchProvisioners(r *http.Request, s session, tags map[string]string) (provisionerCheck, error) {
	ds, err := s.client.ProvisionerDaemons(r.Context())
	var e *codersdk.Error
	if errors.As(err, &e) && e.StatusCode == http.StatusForbidden {
		return provisionerCheck{Hidden: true}, nil
	}
	if err != nil {
		return provisionerCheck{}, err
	}
	var out provisionerCheck
	for _, d := range ds {
		if !tagsMatch(tags, d.Tags) {
			continue
		}
		if d.Status == codersdk.ProvisionerDaemonOffline {
			out.Offline = append(out.Offline, d.Name)
		} else {
			out.Online = append(out.Online, d.Name)
		}
	}
	return out, nil
}

// tagsMatch reports whether a daemon with daemonTags takes a job with
// jobTags, as coderd decides (coderd/provisionertags.go): the job's tags,
// with scope and owner filled in, are a subset of the daemon's. The API
// leaves out an empty owner and untagged sets have no scope; both are put
// back here before comparing.
func tagsMatch(jobTags, daemonTags map[string]string) bool {
	job, daemon := fullTags(jobTags), fullTags(daemonTags)
	for k, v := range job {
		if dv, ok := daemon[k]; !ok || dv != v {
			return false
		}
	}
	return true
}

func fullTags(tags map[string]string) map[string]string {
	out := map[string]string{codersdk.TagScope: codersdk.ProvisionerScopeOrg, codersdk.TagOwner: ""}
	for k, v := range tags {
		out[k] = v
	}
	if out[codersdk.TagScope] == "" {
		out[codersdk.TagScope] = codersdk.ProvisionerScopeOrg
	}
	return out
}

// logText is a job's log as text, with a heading line where the stage
// changes.
func logText(logs []codersdk.ProvisionerJobLog) string {
	var b strings.Builder
	stage := ""
	for _, l := range logs {
		if l.Stage != stage {
			stage = l.Stage
			b.WriteString("== " + stage + " ==\n")
		}
		b.WriteString(l.Output + "\n")
	}
	return b.String()
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
