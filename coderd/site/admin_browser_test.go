package site_test

import (
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// adminAndTemplatePages drives the admin pages and the template pages in
// the running deployment of TestBrowserDashboard. The browser is signed in
// as the owner adminEmail, and the process template is pushed; it is left
// on /templates, signed in as the owner again.
func adminAndTemplatePages(b *browser, adminEmail, adminPassword string) {
	t := b.t
	t.Helper()
	const member, memberPassword = "alice", "alice-password-42"

	// Users: create a member, suspend and activate them.
	b.do("nav has the admin links", chromedp.Navigate(b.url("/workspaces")),
		chromedp.WaitVisible(chromedp.CSS(`nav a[href="/admin/users"]`)),
		chromedp.WaitVisible(chromedp.CSS(`nav a[href="/admin/provisioners"]`)),
		chromedp.WaitVisible(chromedp.CSS(`nav a[href="/admin/audit"]`)))
	b.do("users page", chromedp.Click(chromedp.CSS(`nav a[href="/admin/users"]`)), chromedp.WaitVisible(chromedp.CSS("#users")))
	b.waitText("the owner is listed", `#users tr[data-user="admin"] [data-field=roles]`, "Owner", 5*time.Second)
	b.do("create a member",
		chromedp.SendKeys(chromedp.CSS("#new-username"), member),
		chromedp.SendKeys(chromedp.CSS("#new-email"), member+"@example.com"),
		chromedp.SendKeys(chromedp.CSS("#new-password"), memberPassword),
		chromedp.Click(chromedp.CSS("#create-user-button")),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	b.waitText("created notice", ".notice", "Created user "+member, 5*time.Second)
	b.waitText("the member is listed", `#users tr[data-user="`+member+`"] [data-field=status]`, "active", 5*time.Second)
	b.screenshot("admin-users")
	memberRow := `#users tr[data-user="` + member + `"]`
	if n := get(b, "count the owner's account buttons", chromedp.Evaluate[int](`document.querySelectorAll('#users tr[data-user="admin"] button[data-action]').length`)); n != 0 {
		t.Errorf("the owner's own row has %d suspend/activate buttons, want none", n)
	}
	b.do("suspend the member", chromedp.Click(chromedp.CSS(memberRow+` button[data-action=suspend]`)), chromedp.WaitVisible(chromedp.CSS("#confirm-suspend")))
	b.waitText("asked to confirm", "#confirm-suspend", "Suspend "+member+"?", 5*time.Second)
	b.waitText("not suspended before the confirmation", memberRow+` [data-field=status]`, "active", 5*time.Second)
	b.screenshot("admin-users-confirm-suspend")
	b.do("confirm", chromedp.Click(chromedp.CSS("#confirm-suspend-button")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	b.waitText("suspended notice", ".notice", "Suspended "+member, 5*time.Second)
	b.waitText("the member is suspended", memberRow+` [data-field=status]`, "suspended", 5*time.Second)
	b.screenshot("admin-users-suspended")
	b.do("activate the member", chromedp.Click(chromedp.CSS(memberRow+` button[data-action=activate]`)), chromedp.WaitVisible(chromedp.CSS(".notice")))
	b.waitText("activated notice", ".notice", "Activated "+member, 5*time.Second)
	b.waitText("the member is active again", memberRow+` [data-field=status]`, "active", 5*time.Second)
	b.do("the suspend button is back", chromedp.WaitVisible(chromedp.CSS(memberRow+` button[data-action=suspend]`)))
	b.check()

	// Provisioners: the deployment's built-in daemon.
	b.do("provisioners page", chromedp.Click(chromedp.CSS(`nav a[href="/admin/provisioners"]`)), chromedp.WaitVisible(chromedp.CSS("#provisioners")))
	b.waitText("the built-in daemon is listed", "#provisioners", "builtin", 5*time.Second)
	if row := get(b, "read daemon", chromedp.Text(chromedp.CSS(`#provisioners tr[data-daemon="builtin"]`))); !strings.Contains(row, "scope=organization") ||
		!(strings.Contains(row, "idle") || strings.Contains(row, "busy")) {
		t.Errorf("the built-in daemon's row is %q, want its tags and idle or busy", row)
	}
	b.screenshot("admin-provisioners")
	b.check()

	// Audit: filter through the form for user creations by the owner.
	b.do("audit page", chromedp.Click(chromedp.CSS(`nav a[href="/admin/audit"]`)), chromedp.WaitVisible(chromedp.CSS("#audit")))
	b.do("filter the audit log",
		chromedp.SendKeys(chromedp.CSS("#f-username"), "admin"),
		chromedp.SetValue(chromedp.CSS("#f-action"), "create"),
		chromedp.SetValue(chromedp.CSS("#f-resource"), "user"),
		chromedp.SetValue(chromedp.CSS("#f-outcome"), "success"),
		chromedp.Click(chromedp.CSS("#filter")))
	b.waitLocation("the filtered page", "resource_type=user", 10*time.Second)
	b.do("the filtered table", chromedp.WaitVisible(chromedp.CSS("#audit")))
	b.waitText("the member's creation is listed", "#audit tbody", member, 5*time.Second)
	if rows := get(b, "count rows", chromedp.Evaluate[int](`document.querySelectorAll('#audit tbody tr').length`)); rows != 1 {
		t.Errorf("the filtered audit log has %d rows, want 1 (the creation of %s)", rows, member)
	}
	if loc := b.location(); !strings.Contains(loc, "resource_type=user") || !strings.Contains(loc, "action=create") {
		t.Errorf("the filter form went to %s, want its fields in the query", loc)
	}
	b.screenshot("admin-audit")
	// Paging one record at a time: older, then newer again.
	b.do("audit, one per page", chromedp.Navigate(b.url("/admin/audit?limit=1")), chromedp.WaitVisible(chromedp.CSS(`a[rel=next]`)))
	b.waitText("first page", "#audit-range", "Records 1–1 of", 5*time.Second)
	b.do("older", chromedp.Click(chromedp.CSS(`a[rel=next]`)), chromedp.WaitVisible(chromedp.CSS(`a[rel=prev]`)))
	b.waitText("second page", "#audit-range", "Records 2–2 of", 5*time.Second)
	b.do("newer", chromedp.Click(chromedp.CSS(`a[rel=prev]`)), chromedp.WaitVisible(chromedp.CSS(`#audit`)))
	b.waitText("first page again", "#audit-range", "Records 1–1 of", 5*time.Second)
	b.check()

	// The template page, from the templates list.
	b.do("template page", chromedp.Navigate(b.url("/templates")),
		chromedp.Click(chromedp.CSS(`#main a[href="/templates/process"]`)),
		chromedp.WaitVisible(chromedp.CSS("#active-version")))
	b.waitText("active version succeeded", "#active-version", "succeeded", 5*time.Second)
	b.waitText("its provisioner is online", "#provisioner-status", "Online: 1 matching provisioner daemon online (builtin)", 5*time.Second)
	b.waitText("the active version is listed", "#versions", "active", 5*time.Second)
	if log := get(b, "read import log", chromedp.Text(chromedp.CSS("#import-log"))); strings.Contains(log, "No log lines") || len(log) < 20 {
		t.Errorf("the import log shows %q, want the import's output", log)
	}
	b.screenshot("template")
	version := get(b, "read active version", chromedp.Text(chromedp.CSS("#active-version [data-field=active-version]")))
	b.do("version page", chromedp.Click(chromedp.CSS("#active-version [data-field=active-version] a")), chromedp.WaitVisible(chromedp.CSS("#version")))
	b.waitText("version page heading", "main h1", "Version "+strings.TrimSpace(version), 5*time.Second)
	b.do("create workspace link", chromedp.Navigate(b.url("/templates/process")), chromedp.WaitVisible(chromedp.CSS(`#create-workspace[href="/workspaces/new?template=process"]`)))
	b.check()

	// The member: no admin links, every admin page refused in words.
	b.signOut()
	b.signIn(member+"@example.com", memberPassword)
	if n := get(b, "count admin links", chromedp.Evaluate[int](`document.querySelectorAll('nav a[href^="/admin"]').length`)); n != 0 {
		t.Errorf("a member's nav has %d admin links, want none", n)
	}
	for _, p := range []string{"/admin/users", "/admin/provisioners", "/admin/audit", "/admin/replicas", "/admin/appliance"} {
		b.do("member opens "+p, chromedp.Navigate(b.url(p)), chromedp.WaitVisible(chromedp.CSS("main")))
		body := get(b, "read "+p, chromedp.Text(chromedp.CSS("main")))
		if !strings.Contains(body, "You are not allowed to see this page") || strings.Contains(body, "admin@example.com") || strings.Contains(body, "builtin") {
			t.Errorf("a member opening %s: page says %q, want a refusal in words and nothing else", p, body)
		}
	}
	b.screenshot("member-admin-refused")
	b.do("member's template page", chromedp.Navigate(b.url("/templates/process")), chromedp.WaitVisible(chromedp.CSS("#provisioner-status")))
	b.waitText("member sees no daemons", "#provisioner-status", "Only owners and template admins", 5*time.Second)
	b.mu.Lock()
	b.errors = nil // the 403s of the refused pages are the point
	b.mu.Unlock()
	b.check()
	b.signOut()
	b.signIn(adminEmail, adminPassword)
	b.do("back to templates", chromedp.Navigate(b.url("/templates")), chromedp.WaitVisible(chromedp.CSS(`a[href="/workspaces/new?template=process"]`)))
}
