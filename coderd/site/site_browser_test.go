package site_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testtier"
	"airgapcoder/internal/testwait"
)

// chromiumPath is Debian's chromium (scripts/install-deps.sh installs it).
const chromiumPath = "/usr/bin/chromium"

// jsBudget is the most JavaScript the login and workspace-list pages may load.
const jsBudget = 300 << 10

// browser is a headless Chromium tab that records what the pages do.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base *url.URL

	mu       sync.Mutex
	requests []string // every URL the pages asked for
	scripts  map[network.RequestID]bool
	jsBytes  float64               // JavaScript bytes loaded since the last resetJS
	errors   []string              // console errors, exceptions and error log entries
	ignore   func(url string) bool // log entries of these URLs are not the dashboard's
}

func newBrowser(t *testing.T, base *url.URL, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	testtier.Heavy(t, "starts Chromium")
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("the browser tests need Debian's chromium at %s (scripts/install-deps.sh installs it): %v", chromiumPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, base: base, scripts: map[network.RequestID]bool{}}
	if err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, ev.Request.URL)
			if ev.Type == network.ResourceTypeScript {
				b.scripts[ev.RequestID] = true
			}
		case *network.EventWebSocketCreated:
			b.requests = append(b.requests, ev.URL)
		case *network.EventLoadingFinished:
			if b.scripts[ev.RequestID] {
				b.jsBytes += ev.EncodedDataLength
			}
		case *cdpruntime.EventConsoleAPICalled:
			if ev.Type == cdpruntime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				b.errors = append(b.errors, "console.error: "+strings.Join(args, " "))
			}
		case *cdpruntime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.errors = append(b.errors, fmt.Sprintf("exception: %s (%s:%d)", msg, d.URL, d.LineNumber))
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError && (b.ignore == nil || !b.ignore(ev.Entry.URL)) {
				b.errors = append(b.errors, fmt.Sprintf("log %s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	for _, err := range []error{
		call(ctx, network.Enable, network.EnableParams{}),
		call(ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}),
		call(ctx, cdplog.Enable, cdp.Empty{}),
		call(ctx, cdpruntime.Enable, cdp.Empty{}),
	} {
		if err != nil {
			t.Fatalf("start chromium: %v", err)
		}
	}
	return b
}

func (b *browser) do(step string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("%s: %v (page %s)", step, err, loc)
	}
}

// get runs one action that returns a value.
func get[T any](b *browser, step string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v", step, err)
	}
	return v
}

func (b *browser) url(path string) string { return b.base.String() + path }

// resetJS starts counting JavaScript bytes afresh.
func (b *browser) resetJS() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.jsBytes = 0
}

func (b *browser) js() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.jsBytes
}

// check fails on console errors so far and on requests to hosts other
// than the deployment's and also (host:port, e.g. a subdomain app's).
func (b *browser) check(also ...string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		b.t.Errorf("browser console: %s", e)
	}
	b.errors = nil
	for _, raw := range b.requests {
		u, err := url.Parse(raw)
		if err != nil {
			b.t.Errorf("request to unparsable URL %q", raw)
			continue
		}
		switch u.Scheme {
		case "data", "about", "blob":
			continue
		}
		if u.Host != b.base.Host && !slices.Contains(also, u.Host) {
			b.t.Errorf("request to another host: %s (the deployment is %s)", raw, b.base.Host)
		}
	}
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	buf := get(b, "screenshot "+name, chromedp.FullScreenshot(100))
	p := filepath.Join(b.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// waitText waits until the element sel's text contains want.
func (b *browser) waitText(step, sel, want string, timeout time.Duration) {
	b.t.Helper()
	testwait.For(b.t, timeout, fmt.Sprintf("%s: %s showing %q", step, sel, want), func() (bool, string) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		return err == nil && strings.Contains(got, want), fmt.Sprintf("it shows %q (err %v)", got, err)
	})
}

// typeLine types text and Enter into the terminal as a keyboard would: the
// text as one input event (chromedp's SendKeys sends both a keydown with text
// and a char event per key, which xterm.js takes as two keystrokes).
func (b *browser) typeLine(text string) {
	b.t.Helper()
	b.do("focus terminal", chromedp.Focus(chromedp.CSS(".xterm-helper-textarea")))
	for _, err := range []error{
		call(b.ctx, input.InsertText, input.InsertTextParams{Text: text}),
		call(b.ctx, input.DispatchKeyEvent, input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown,
			Key: "Enter", Code: "Enter", Text: "\r", WindowsVirtualKeyCode: 13}),
		call(b.ctx, input.DispatchKeyEvent, input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp,
			Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13}),
	} {
		if err != nil {
			b.t.Fatalf("type %q: %v", text, err)
		}
	}
}

// ctrlShift presses Ctrl+Shift+key in the focused element.
func (b *browser) ctrlShift(key, code string, vk int64) {
	b.t.Helper()
	const mods = 2 | 8 // Ctrl, Shift
	for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
		if err := call(b.ctx, input.DispatchKeyEvent, input.DispatchKeyEventParams{Type: typ, Modifiers: mods,
			Key: key, Code: code, WindowsVirtualKeyCode: vk}); err != nil {
			b.t.Fatalf("Ctrl+Shift+%s: %v", key, err)
		}
	}
}

// waitTerminalLine waits until a line of the terminal's buffer is want.
func (b *browser) waitTerminalLine(want string, timeout time.Duration) {
	b.t.Helper()
	const read = `(() => { const buf = window.coderTerminal.buffer.active; const out = [];
		for (let i = 0; i < buf.length; i++) out.push(buf.getLine(i).translateToString(true).trim());
		return out.join("\n"); })()`
	testwait.For(b.t, timeout, fmt.Sprintf("terminal: a line %q", want), func() (bool, string) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](read))
		return err == nil && slices.Contains(strings.Split(got, "\n"), want), fmt.Sprintf("(err %v) screen:\n%s", err, strings.TrimSpace(got))
	})
}

func (b *browser) location() string {
	return get(b, "location", chromedp.Location())
}

// waitLocation waits until the page's URL contains want: after a click
// that navigates, the old page still matches most selectors for a moment.
func (b *browser) waitLocation(step, want string, timeout time.Duration) {
	b.t.Helper()
	testwait.For(b.t, timeout, fmt.Sprintf("%s: a URL containing %q", step, want), func() (bool, string) {
		loc := b.location()
		return strings.Contains(loc, want), "at " + loc
	})
}

// signIn fills in the login form (the browser is on it).
func (b *browser) signIn(email, password string) {
	b.t.Helper()
	b.do("sign in as "+email,
		chromedp.WaitVisible(chromedp.CSS("#email")),
		chromedp.SendKeys(chromedp.CSS("#email"), email),
		chromedp.SendKeys(chromedp.CSS("#password"), password),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("#workspaces")))
}

func (b *browser) signOut() {
	b.t.Helper()
	b.do("sign out",
		chromedp.Click(chromedp.CSS(`form[action="/logout"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/login"]`)))
}

// TestBrowserDashboard drives the dashboard in headless Chromium against a
// real deployment: coderd, a built-in provisioner running terraform on the
// process template, and the real agent it starts.
func TestBrowserDashboard(t *testing.T) {
	t.Parallel()
	d := coderdtest.NewWithProvisioners(t, coderBinary(t))

	b := newBrowser(t, d.URL)
	t.Logf("screenshots: %s (kept with go test -artifacts)", t.ArtifactDir())
	const email, password = "admin@example.com", "correct-horse-battery"

	// First-user setup: / goes to /setup while there is no user.
	b.do("open /", chromedp.Navigate(b.url("/")), chromedp.WaitVisible(chromedp.CSS(`form[action="/setup"]`)))
	b.screenshot("setup")
	b.do("set up the first user",
		chromedp.SendKeys(chromedp.CSS("#email"), email),
		chromedp.SendKeys(chromedp.CSS("#username"), "admin"),
		chromedp.SendKeys(chromedp.CSS("#password"), password),
		chromedp.Click(chromedp.CSS(`form[action="/setup"] button`)),
		chromedp.WaitVisible(chromedp.CSS("#workspaces")))
	b.check()

	// Sign out and in again; count the JavaScript of both pages.
	b.signOut()
	b.resetJS()
	b.do("reload login", chromedp.Navigate(b.url("/login")), chromedp.WaitVisible(chromedp.CSS("#email")))
	if js := b.js(); js > jsBudget {
		t.Errorf("login page loads %.0f bytes of JavaScript, budget %d", js, jsBudget)
	}
	b.screenshot("login")
	b.signIn(email, password)
	b.resetJS()
	b.do("reload workspaces", chromedp.Navigate(b.url("/workspaces")), chromedp.WaitVisible(chromedp.CSS("#workspaces")), chromedp.Sleep(500*time.Millisecond))
	js := b.js()
	if js > jsBudget || js == 0 {
		t.Errorf("workspace list loads %.0f bytes of JavaScript, want some and under %d", js, jsBudget)
	}
	t.Logf("workspace list page loads %.0f bytes of JavaScript", js)
	b.check()

	// The process template, pushed through the API as the CLI would.
	admin := d.Client()
	login, err := admin.LoginWithPassword(context.Background(), codersdk.LoginWithPasswordRequest{Email: email, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	admin.SessionToken = login.SessionToken
	base := t.TempDir()
	pushProcessTemplate(t, admin, base)
	b.do("templates page", chromedp.Navigate(b.url("/templates")), chromedp.WaitVisible(chromedp.CSS(`a[href="/workspaces/new?template=process"]`)))
	b.screenshot("templates")
	adminAndTemplatePages(b, email, password)

	// Create a workspace whose startup script says something and serves a
	// page on a port.
	port := freePort(t)
	home := filepath.Join(base, "admin", "dev")
	script := fmt.Sprintf(`echo startup-says-hello && mkdir -p "$HOME/www" && echo dev-url-ok > "$HOME/www/index.html" && `+
		`(busybox httpd -f -p 127.0.0.1:%d -h "$HOME/www" >/dev/null 2>&1 & echo $! > "$HOME/httpd.pid")`, port)
	t.Cleanup(func() {
		// Neither the agent nor the web server may outlive the test.
		if w, err := admin.WorkspaceByOwnerAndName(context.Background(), codersdk.Me, "dev"); err == nil {
			_, _ = admin.CreateWorkspaceBuild(context.Background(), w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop})
		}
		if pid, err := os.ReadFile(filepath.Join(home, "httpd.pid")); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil {
				if p, err := os.FindProcess(n); err == nil {
					_ = p.Kill()
				}
			}
		}
	})
	b.do("new workspace form",
		chromedp.Click(chromedp.CSS(`a[href="/workspaces/new?template=process"]`)),
		chromedp.WaitVisible(chromedp.CSS("#name")),
		chromedp.SendKeys(chromedp.CSS("#name"), "dev"),
		chromedp.SetValue(chromedp.CSS(`[name="param.startup_script"]`), script))
	b.screenshot("new-workspace")
	b.do("create workspace",
		chromedp.Click(chromedp.CSS(`form[action^="/workspaces/new"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("#workspace")))
	if loc := b.location(); !strings.HasSuffix(loc, "/@admin/dev") {
		t.Fatalf("after create: at %s, want /@admin/dev", loc)
	}
	// No reload from here: the page follows the build by itself.
	b.waitText("workspace reaches running", "#workspace [data-field=status]", "running", 3*time.Minute)
	b.waitText("agent becomes ready", "#workspace [data-field=agents]", "lifecycle ready", 2*time.Minute)
	// The workspace lives under the template's base_dir.
	if _, err := os.Stat(filepath.Join(home, "www", "index.html")); err != nil {
		t.Fatalf("the startup script's page is not in the workspace's folder: %v", err)
	}
	b.waitText("build log streams", "#build-log", "Apply complete", 30*time.Second)
	portLink := fmt.Sprintf(`#workspace a[href="/@admin/dev/ports/%d/"]`, port)
	b.waitText("listening port appears", "#workspace [data-field=agents]", strconv.Itoa(port), 90*time.Second)
	workspaceLiveParts(b)
	b.screenshot("workspace")
	b.check()

	// The dev URL of that port, opened from its link.
	href := get(b, "read port link", chromedp.AttributeValue(chromedp.CSS(portLink), "href")).Value
	b.mu.Lock()
	b.ignore = func(u string) bool { return strings.Contains(u, "/ports/") || strings.Contains(u, "/apps/") }
	b.mu.Unlock()
	b.do("open dev URL", chromedp.Navigate(b.url(href)))
	b.waitText("dev URL page", "body", "dev-url-ok", 30*time.Second)
	b.check()

	// The web terminal: type a command, see its output; a reload of the tab
	// comes back to the same session (its id is in sessionStorage).
	b.do("back to the workspace", chromedp.Navigate(b.url("/@admin/dev")), chromedp.WaitVisible(chromedp.CSS("#terminal-link")))
	b.do("open terminal", chromedp.Click(chromedp.CSS("#terminal-link")), chromedp.WaitVisible(chromedp.CSS("#terminal .xterm")))
	b.waitText("terminal connects", "#term-status", "connected", 30*time.Second)
	b.typeLine("echo hi")
	b.waitTerminalLine("hi", 30*time.Second)
	b.screenshot("terminal")
	b.do("reload terminal", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#terminal .xterm")))
	b.waitText("terminal reconnects", "#term-status", "connected", 30*time.Second)
	b.waitTerminalLine("hi", 10*time.Second) // the same session replays its screen
	b.typeLine("echo again-$((40+2))")
	b.waitTerminalLine("again-42", 30*time.Second)
	b.check()

	// Copy and paste: select a line of output, Ctrl+Shift+C puts it on the
	// clipboard; a command on the clipboard, Ctrl+Shift+V and Enter run it.
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		if err := call(b.ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: name}, Setting: cdpbrowser.PermissionSettingGranted, Origin: b.base.String(),
		}); err != nil {
			t.Fatalf("grant %s: %v", name, err)
		}
	}
	b.typeLine("echo copy-$((6*7))-me")
	b.waitTerminalLine("copy-42-me", 30*time.Second)
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(() => { const t = window.coderTerminal, buf = t.buffer.active;
		for (let i = buf.length - 1; i >= 0; i--) if (buf.getLine(i).translateToString(true).trim() === "copy-42-me") { t.selectLines(i, i); return true; }
		return false; })()`)); err != nil {
		t.Fatal(err)
	}
	b.ctrlShift("C", "KeyC", 67)
	b.waitText("copy notice", "#term-clipboard", "Copied", 10*time.Second)
	if got := get(b, "read the clipboard", chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise)); strings.TrimSpace(got) != "copy-42-me" {
		t.Errorf("clipboard after Ctrl+Shift+C: %q, want the selected line", got)
	}
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](`navigator.clipboard.writeText("echo pasted-$((50+5))")`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatal(err)
	}
	b.do("focus terminal", chromedp.Focus(chromedp.CSS(".xterm-helper-textarea")))
	b.ctrlShift("V", "KeyV", 86)
	// The clipboard is read asynchronously: Enter once the command is there.
	testwait.For(t, 10*time.Second, "Ctrl+Shift+V pasting the clipboard into the terminal", testwait.Bool(func() bool {
		return get(b, "pasted text", chromedp.Evaluate[bool](`(() => { const buf = window.coderTerminal.buffer.active;
		for (let i = 0; i < buf.length; i++) if (buf.getLine(i).translateToString(true).endsWith("echo pasted-$((50+5))")) return true;
		return false; })()`))
	}))
	b.typeLine("")
	b.waitTerminalLine("pasted-55", 30*time.Second)
	b.check()

	// The session ends while the terminal is open, then its connection
	// drops: the terminal says why and stops, rather than retrying forever.
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](`fetch("/api/v2/users/logout", {method: "POST"}).then(r => r.status)`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatal(err)
	}
	// Count the reconnects the page schedules (terminal.js retries with
	// setTimeout(connect, delay)): giving up means scheduling none.
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](`(() => { window.coderReconnects = 0; const st = window.setTimeout;
		window.setTimeout = (f, ...rest) => { if (f && f.name === "connect") window.coderReconnects++; return st(f, ...rest); }; })()`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](`window.coderTerminalSocket.close(4000, "test")`)); err != nil {
		t.Fatal(err)
	}
	b.waitText("terminal gives up", "#term-status", "Your session ended; the terminal stopped reconnecting.", 10*time.Second)
	if href := get(b, "sign-in link", chromedp.Evaluate[string](`document.querySelector("#term-status a").getAttribute("href")`)); !strings.HasPrefix(href, "/login?redirect=%2F%40admin%2Fdev%2Fterminal") {
		t.Errorf("the terminal's sign-in link: %q", href)
	}
	// The status is written last by the close handler, which then returns
	// without scheduling a reconnect.
	if n := get(b, "reconnects scheduled", chromedp.Evaluate[int](`window.coderReconnects`)); n != 0 {
		t.Errorf("the terminal scheduled %d reconnects after the session ended, want none", n)
	}
	if status := get(b, "status", chromedp.Text(chromedp.CSS("#term-status"))); !strings.HasPrefix(status, "Your session ended") {
		t.Errorf("the terminal still reconnects after the session ended: %q", status)
	}
	b.mu.Lock()
	b.errors = nil // the refused reconnects and the API's 401 are the point
	b.mu.Unlock()
	b.do("sign in again", chromedp.Navigate(b.url("/login")))
	b.signIn(email, password)

	// A member sees neither the workspace in the list nor its page.
	_, _ = d.CreateUser(t, admin, "member")
	b.do("back to the dashboard", chromedp.Navigate(b.url("/workspaces")), chromedp.WaitVisible(chromedp.CSS("#workspaces")))
	b.signOut()
	b.signIn("member@example.com", coderdtest.FirstUserPassword)
	list := get(b, "member's list", chromedp.Text(chromedp.CSS("#workspaces")))
	if strings.Contains(list, "dev") {
		t.Errorf("a member's workspace list shows the admin's workspace:\n%s", list)
	}
	b.screenshot("member-workspaces")
	b.do("member opens admin's workspace", chromedp.Navigate(b.url("/@admin/dev")), chromedp.WaitVisible(chromedp.CSS("main")))
	body := get(b, "read", chromedp.Text(chromedp.CSS("main")))
	// Not found, as for a workspace that does not exist: nothing confirms
	// that the owner or the workspace exists.
	if strings.Contains(body, "Terminal") || strings.Contains(body, "process") || strings.Contains(body, "Forbidden") ||
		!strings.Contains(body, "Workspace admin/dev not found, or not yours to see") {
		t.Errorf("a member opening /@admin/dev: page says %q, want the same not-found as for a workspace that does not exist", body)
	}
	b.do("member opens a workspace that does not exist", chromedp.Navigate(b.url("/@admin/nothing/terminal")), chromedp.WaitVisible(chromedp.CSS("main")))
	if other := get(b, "read", chromedp.Text(chromedp.CSS("main"))); !strings.Contains(other, "Workspace admin/nothing not found, or not yours to see") {
		t.Errorf("a member opening a missing workspace's terminal: %q", other)
	}
	b.mu.Lock()
	b.errors = nil // the 404 of that page is the point
	b.mu.Unlock()
	b.do("back", chromedp.Navigate(b.url("/workspaces")), chromedp.WaitVisible(chromedp.CSS("#workspaces")))
	b.signOut()
	b.signIn(email, password)

	// Stop, then delete with confirmation, watching the status live.
	b.do("open workspace", chromedp.Navigate(b.url("/@admin/dev")), chromedp.WaitVisible(chromedp.CSS("#stop")))
	b.do("stop", chromedp.Click(chromedp.CSS("#stop")), chromedp.WaitVisible(chromedp.CSS("#workspace")))
	b.waitText("workspace stops", "#workspace [data-field=status]", "stopped", 2*time.Minute)
	if c := get(b, "status colour", chromedp.Evaluate[string](`document.querySelector("#workspace [data-field=status]").className`)); c != "status idle" {
		t.Errorf("a stopped workspace's status, updated live, has class %q, want %q (at rest, not busy)", c, "status idle")
	}
	b.waitButtons("stopped: only Start", map[string]bool{"start": true, "stop": false, "cancel": false, "update": false}, 10*time.Second)
	b.do("delete without confirmation",
		chromedp.Click(chromedp.CSS("#workspace details summary")),
		chromedp.Click(chromedp.CSS("#delete")))
	// The input is required: the browser refuses to submit it empty.
	b.do("confirm delete",
		chromedp.SendKeys(chromedp.CSS("#confirm"), "dev"),
		chromedp.Click(chromedp.CSS("#delete")),
		chromedp.WaitVisible(chromedp.CSS("#workspace")))
	b.waitText("workspace is deleted", "#workspace [data-field=status]", "deleted", 2*time.Minute)
	b.screenshot("deleted")
	b.do("list after delete", chromedp.Navigate(b.url("/workspaces")), chromedp.WaitVisible(chromedp.CSS("#workspaces")))
	list = get(b, "read list", chromedp.Text(chromedp.CSS("#workspaces")))
	if strings.Contains(list, "dev") {
		t.Errorf("the deleted workspace is still listed:\n%s", list)
	}
	b.check()
}

// TestBrowserSessionExpired: a session that ended sends the visitor to the
// login page with the reason, and back to the page after signing in.
func TestBrowserSessionExpired(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{})
	d.CreateFirstUser(t)
	b := newBrowser(t, d.URL)
	if err := call(b.ctx, network.SetCookie, network.SetCookieParams{
		Name: codersdk.SessionTokenCookie, Value: "aaaaaaaaaa-bbbbbbbbbbbbbbbbbbbbbb", URL: d.URL.String(),
	}); err != nil {
		t.Fatal(err)
	}
	b.do("stale cookie",
		chromedp.Navigate(b.url("/templates")),
		chromedp.WaitVisible(chromedp.CSS("#email")))
	b.waitText("expiry message", ".notice", "Your session ended", 5*time.Second)
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#email"), "admin"),
		chromedp.SendKeys(chromedp.CSS("#password"), coderdtest.FirstUserPassword),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type=submit]`)))
	// The login page has a main h1 too: wait for the templates page's.
	b.waitText("back at templates", "main h1", "Templates", 10*time.Second)
	if loc := b.location(); !strings.HasSuffix(loc, "/templates") {
		t.Errorf("after signing in: at %s, want back at /templates", loc)
	}
	b.do("wrong password", chromedp.Navigate(b.url("/login")), chromedp.WaitVisible(chromedp.CSS("#email")),
		chromedp.SendKeys(chromedp.CSS("#email"), "admin"), chromedp.SendKeys(chromedp.CSS("#password"), "nope"),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type=submit]`)))
	b.waitText("error in words", ".error", "Incorrect email or password", 5*time.Second)
	b.mu.Lock()
	b.errors = nil // the 401 of the failed login is expected
	b.mu.Unlock()
	b.check()
}

// call sends one protocol command and drops its (empty) result.
func call[P, R any](ctx context.Context, cmd cdp.Command[P, R], params P) error {
	_, err := chromedp.Call(ctx, cmd, params)
	return err
}

// pushProcessTemplate pushes examples/templates/process with its base_dir
// (a template admin's variable).
func pushProcessTemplate(t *testing.T, c *codersdk.Client, base string) {
	t.Helper()
	pushTemplate(t, c, "process", coderdtest.TemplateFiles(t, "../../examples/templates/process"),
		[]codersdk.VariableValue{{Name: "base_dir", Value: base}})
}

// pushTemplate imports files with the template admin's variables vars and
// creates the template name from them.
func pushTemplate(t *testing.T, c *codersdk.Client, name string, files map[string]string, vars []codersdk.VariableValue) codersdk.Template {
	t.Helper()
	ctx := context.Background()
	v := coderdtest.UploadVersionRequest(t, c, files, codersdk.CreateTemplateVersionRequest{UserVariableValues: vars})
	testwait.For(t, 2*time.Minute, "the template import to finish", func() (bool, string) {
		tv, err := c.TemplateVersion(ctx, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if tv.Job.Error != "" {
			t.Fatalf("template import: %s", tv.Job.Error)
		}
		return !tv.Job.Status.Active(), "job " + string(tv.Job.Status)
	})
	tpl, err := c.CreateTemplate(ctx, "default", codersdk.CreateTemplateRequest{Name: name, TemplateVersionID: v.ID})
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// coderBinary is the coder binary: the process template's agent.
func coderBinary(t *testing.T) string { return testbin.Coder(t) }
