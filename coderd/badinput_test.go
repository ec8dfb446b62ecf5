package coderd_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// biCase is one bad request and the answer it must get: the status, a
// message containing message, and (when field is set) a validation error
// naming field.
type biCase struct {
	name        string
	method      string
	path        string
	token       string
	body        any // string or []byte; nil for none
	contentType string
	status      int
	message     string
	field       string
	detail      string // when set, the detail must contain it
}

// biFixture is the deployment the bad-input tests share.
type biFixture struct {
	d        *coderdtest.Deployment
	owner    *codersdk.Client
	member   *codersdk.Client
	daemon   *coderdtest.Daemon
	template codersdk.Template
	// clock is coderd's clock: tests move it forward instead of sleeping.
	clock *offsetClock
}

const biPSK = "badinput-psk"

func newBIFixture(t *testing.T) *biFixture {
	t.Helper()
	clock := &offsetClock{}
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: biPSK, Now: clock.Now})
	owner, _ := d.CreateFirstUser(t)
	member, _ := d.CreateUser(t, owner, "alice")
	daemon := d.NewDaemon(t, "badinput-daemon", nil)
	tpl := coderdtest.CreateTemplate(t, owner, daemon, "badinput", coderdtest.MinimalTemplate, nil)
	return &biFixture{d: d, owner: owner, member: member, daemon: daemon, template: tpl, clock: clock}
}

func (f *biFixture) run(t *testing.T, cases []biCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			switch b := tc.body.(type) {
			case nil:
			case string:
				body = strings.NewReader(b)
			case []byte:
				body = bytes.NewReader(b)
			default:
				t.Fatalf("body of type %T", tc.body)
			}
			status, resp := coderdtest.Do(t, tc.method, f.d.URL.String()+tc.path, tc.token, body, tc.contentType)
			biCheck(t, tc.method+" "+tc.path, status, resp, tc)
		})
	}
}

// biCheck compares an answer with what tc wants.
func biCheck(t *testing.T, what string, status int, resp []byte, tc biCase) {
	t.Helper()
	if status != tc.status {
		t.Fatalf("%s: got %d, want %d: %s", what, status, tc.status, resp)
	}
	var e codersdk.Response
	if err := json.Unmarshal(resp, &e); err != nil {
		t.Fatalf("%s: got body %q, want the JSON error envelope: %v", what, resp, err)
	}
	if !strings.Contains(e.Message, tc.message) || e.Message == "" {
		t.Errorf("%s: got message %q, want one containing %q", what, e.Message, tc.message)
	}
	if tc.detail != "" && !strings.Contains(e.Detail, tc.detail) {
		t.Errorf("%s: got detail %q, want one containing %q", what, e.Detail, tc.detail)
	}
	if tc.field != "" {
		found := false
		for _, v := range e.Validations {
			found = found || (v.Field == tc.field && v.Detail != "")
		}
		if !found {
			t.Errorf("%s: got validations %+v, want one for field %q", what, e.Validations, tc.field)
		}
	}
}

// biEntry is one member of a hand-made tar.
type biEntry struct {
	hdr  tar.Header
	body string
}

func biFile(name, body string) biEntry {
	return biEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, body: body}
}

// biTar writes entries with archive/tar, which happily writes names and
// types the server must refuse.
func biTar(t *testing.T, entries ...biEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := tw.WriteHeader(&e.hdr); err != nil {
			t.Fatalf("write header %s: %v", e.hdr.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatalf("write %s: %v", e.hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBadInputJSON(t *testing.T) {
	f := newBIFixture(t)
	const login = "/api/v2/users/login"
	const jsonCT = "application/json"
	tok := f.owner.SessionToken
	f.run(t, []biCase{
		{name: "truncated", method: "POST", path: login, body: `{"email":`, contentType: jsonCT, status: 400, message: "Malformed JSON"},
		{name: "syntax error", method: "POST", path: login, body: `{"email" "a"}`, contentType: jsonCT, status: 400, message: "Malformed JSON", detail: "at byte"},
		{name: "not JSON", method: "POST", path: login, body: `email=a&password=b`, contentType: jsonCT, status: 400, message: "Malformed JSON"},
		{name: "unknown field", method: "POST", path: login, body: `{"email":"a@example.com","password":"x","admin":true}`, contentType: jsonCT,
			status: 400, message: "Validation failed", field: "admin"},
		{name: "wrong type", method: "POST", path: login, body: `{"email":5,"password":"x"}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "email"},
		{name: "array instead of object", method: "POST", path: login, body: `[]`, contentType: jsonCT, status: 400, message: "must be a JSON object, got a JSON array"},
		{name: "string instead of object", method: "POST", path: login, body: `"admin"`, contentType: jsonCT, status: 400, message: "must be a JSON object, got a JSON string"},
		{name: "empty body", method: "POST", path: login, contentType: jsonCT, status: 400, message: "Request body is empty"},
		{name: "empty body without content type", method: "POST", path: login, status: 400, message: "Request body is empty"},
		{name: "trailing data", method: "POST", path: login, body: `{"email":"a@example.com","password":"x"} {}`, contentType: jsonCT,
			status: 400, message: "data after the JSON object"},
		{name: "over 1 MiB", method: "POST", path: login, body: `{"email":"` + strings.Repeat("a", 1<<20) + `"}`, contentType: jsonCT,
			status: 413, message: "larger than"},
		{name: "text/plain", method: "POST", path: login, body: `{"email":"a@example.com","password":"x"}`, contentType: "text/plain",
			status: 415, message: "Content-Type must be application/json"},
		{name: "form", method: "POST", path: login, body: `email=a&password=b`, contentType: "application/x-www-form-urlencoded",
			status: 415, message: "Content-Type must be application/json"},
		// A charset parameter is fine: the request gets as far as the password check.
		{name: "charset accepted", method: "POST", path: login, body: `{"email":"admin@example.com","password":"wrong-password"}`,
			contentType: "application/json; charset=utf-8", status: 401, message: "Incorrect email or password"},
		// The same rules hold behind authentication.
		{name: "token: text/plain", method: "POST", path: "/api/v2/users/me/keys/tokens", token: tok, body: `{}`, contentType: "text/plain",
			status: 415, message: "Content-Type must be application/json"},
		{name: "token: malformed", method: "POST", path: "/api/v2/users/me/keys/tokens", token: tok, body: `{`, contentType: jsonCT,
			status: 400, message: "Malformed JSON"},
		{name: "workspace: unknown field", method: "POST", path: "/api/v2/users/me/workspaces", token: tok,
			body: `{"name":"x","template_id":"` + f.template.ID + `","ttl":5}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "ttl"},
		{name: "template: empty body", method: "POST", path: "/api/v2/organizations/default/templates", token: tok, contentType: jsonCT,
			status: 400, message: "Request body is empty"},
	})
}

func TestBadInputAuth(t *testing.T) {
	f := newBIFixture(t)
	ctx := context.Background()
	const jsonCT = "application/json"
	f.run(t, []biCase{
		{name: "wrong password", method: "POST", path: "/api/v2/users/login", body: `{"email":"admin@example.com","password":"wrong-password"}`,
			contentType: jsonCT, status: 401, message: "Incorrect email or password"},
		{name: "unknown email", method: "POST", path: "/api/v2/users/login", body: `{"email":"nobody@example.com","password":"wrong-password"}`,
			contentType: jsonCT, status: 401, message: "Incorrect email or password"},
		{name: "missing email", method: "POST", path: "/api/v2/users/login", body: `{"password":"x"}`,
			contentType: jsonCT, status: 400, message: "Validation failed", field: "email"},
		{name: "missing password", method: "POST", path: "/api/v2/users/login", body: `{"email":"admin@example.com"}`,
			contentType: jsonCT, status: 400, message: "Validation failed", field: "password"},
		{name: "no token", method: "GET", path: "/api/v2/users/me", status: 401, message: "not signed in"},
		{name: "malformed token", method: "GET", path: "/api/v2/users/me", token: "not-a-token", status: 401, message: "Invalid session token"},
		{name: "unknown token", method: "GET", path: "/api/v2/users/me", token: "abcdefghij-abcdefghijabcdefghijab", status: 401, message: "no such key"},
		{name: "wrong secret", method: "GET", path: "/api/v2/users/me", token: f.owner.SessionToken[:11] + strings.Repeat("x", 22),
			status: 401, message: "does not match"},
	})

	t.Run("expired token", func(t *testing.T) {
		k, err := f.member.CreateToken(ctx, codersdk.Me, codersdk.CreateTokenRequest{Lifetime: time.Minute, TokenName: "short-lived"})
		if err != nil {
			t.Fatal(err)
		}
		status, resp := coderdtest.Do(t, "GET", f.d.URL.String()+"/api/v2/users/me", k.Key, nil, "")
		if status != http.StatusOK {
			t.Fatalf("fresh token: got %d, want 200: %s", status, resp)
		}
		keys, err := f.member.Tokens(ctx, codersdk.Me)
		if err != nil || len(keys) != 1 {
			t.Fatalf("tokens: got %v, %v, want one", keys, err)
		}
		// Past the expiry by coderd's clock; put it back for the next cases.
		past := keys[0].ExpiresAt.Sub(f.clock.Now()) + time.Second
		f.clock.Advance(past)
		defer f.clock.Advance(-past)
		status, resp = coderdtest.Do(t, "GET", f.d.URL.String()+"/api/v2/users/me", k.Key, nil, "")
		biCheck(t, "expired token", status, resp, biCase{status: 401, message: "expired"})
	})

	t.Run("token lifetime", func(t *testing.T) {
		f.run(t, []biCase{
			{name: "under a second", method: "POST", path: "/api/v2/users/me/keys/tokens", token: f.member.SessionToken,
				body: `{"lifetime":5}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "lifetime"},
			{name: "over the maximum", method: "POST", path: "/api/v2/users/me/keys/tokens", token: f.member.SessionToken,
				body: `{"lifetime":` + "9000000000000000000" + `}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "lifetime"},
		})
	})

	t.Run("duplicate token name", func(t *testing.T) {
		if _, err := f.member.CreateToken(ctx, codersdk.Me, codersdk.CreateTokenRequest{TokenName: "ci"}); err != nil {
			t.Fatal(err)
		}
		f.run(t, []biCase{{name: "again", method: "POST", path: "/api/v2/users/me/keys/tokens", token: f.member.SessionToken,
			body: `{"token_name":"ci"}`, contentType: jsonCT, status: 409, message: `A token named "ci" already exists`}})
	})

	t.Run("token after logout", func(t *testing.T) {
		c := f.d.Client()
		login, err := c.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "alice@example.com", Password: coderdtest.FirstUserPassword})
		if err != nil {
			t.Fatal(err)
		}
		c.SessionToken = login.SessionToken
		if err := c.Logout(ctx); err != nil {
			t.Fatalf("logout: %v", err)
		}
		status, resp := coderdtest.Do(t, "GET", f.d.URL.String()+"/api/v2/users/me", login.SessionToken, nil, "")
		biCheck(t, "token after logout", status, resp, biCase{status: 401, message: "no such key"})
		// The member's other session still works.
		if status, resp := coderdtest.Do(t, "GET", f.d.URL.String()+"/api/v2/users/me", f.member.SessionToken, nil, ""); status != http.StatusOK {
			t.Errorf("other session after logout: got %d, want 200: %s", status, resp)
		}
	})
}

func TestBadInputUsers(t *testing.T) {
	f := newBIFixture(t)
	const jsonCT = "application/json"
	tok := f.owner.SessionToken
	user := func(username, email, password string) string {
		b, _ := json.Marshal(codersdk.CreateUserRequest{Username: username, Email: email, Password: password})
		return string(b)
	}
	const pw = coderdtest.FirstUserPassword
	f.run(t, []biCase{
		{name: "second first user", method: "POST", path: "/api/v2/users/first", body: user("second", "second@example.com", pw),
			contentType: jsonCT, status: 409, message: "already been created"},
		{name: "duplicate username", method: "POST", path: "/api/v2/users", token: tok, body: user("alice", "other@example.com", pw),
			contentType: jsonCT, status: 409, message: "already exists"},
		{name: "duplicate username in other case", method: "POST", path: "/api/v2/users", token: tok, body: user("ALICE", "other@example.com", pw),
			contentType: jsonCT, status: 409, message: "already exists"},
		{name: "duplicate email in other case", method: "POST", path: "/api/v2/users", token: tok, body: user("alice3", "Alice@Example.com", pw),
			contentType: jsonCT, status: 409, message: "already exists"},
		{name: "duplicate email", method: "POST", path: "/api/v2/users", token: tok, body: user("alice2", "alice@example.com", pw),
			contentType: jsonCT, status: 409, message: "already exists"},
		{name: "invalid username", method: "POST", path: "/api/v2/users", token: tok, body: user("bad name!", "bad@example.com", pw),
			contentType: jsonCT, status: 400, message: "Validation failed", field: "username"},
		{name: "empty username", method: "POST", path: "/api/v2/users", token: tok, body: user("", "bad@example.com", pw),
			contentType: jsonCT, status: 400, message: "Validation failed", field: "username"},
		{name: "reserved username", method: "POST", path: "/api/v2/users", token: tok, body: user("me", "me@example.com", pw),
			contentType: jsonCT, status: 400, message: "Validation failed", field: "username"},
		{name: "invalid email", method: "POST", path: "/api/v2/users", token: tok, body: user("bob", "not-an-email", pw),
			contentType: jsonCT, status: 400, message: "Validation failed", field: "email"},
		{name: "email with display name", method: "POST", path: "/api/v2/users", token: tok, body: user("bob", "Bob <bob@example.com>", pw),
			contentType: jsonCT, status: 400, message: "Validation failed", field: "email"},
		{name: "short password", method: "POST", path: "/api/v2/users", token: tok, body: user("bob", "bob@example.com", "short"),
			contentType: jsonCT, status: 400, message: "Validation failed", field: "password"},
		{name: "long password", method: "POST", path: "/api/v2/users", token: tok, body: user("bob", "bob@example.com", strings.Repeat("p", 73)),
			contentType: jsonCT, status: 400, message: "Validation failed", field: "password"},
		{name: "unknown role", method: "POST", path: "/api/v2/users", token: tok,
			body:        `{"username":"bob","email":"bob@example.com","password":"` + pw + `","roles":["superuser"]}`,
			contentType: jsonCT, status: 400, message: "Validation failed", field: "roles"},
		{name: "owner drops own owner role", method: "PUT", path: "/api/v2/users/me/roles", token: tok, body: `{"roles":[]}`,
			contentType: jsonCT, status: 400, message: "cannot remove your own owner role"},
	})
}

func TestBadInputUpload(t *testing.T) {
	f := newBIFixture(t)
	tok := f.owner.SessionToken
	const tarCT = codersdk.ContentTypeTar
	const outside = "a path would land outside the template folder"
	good := biFile("main.tf", `resource "terraform_data" "x" {}`)

	// A header that declares more bytes than the limit, with no data after it.
	var huge bytes.Buffer
	tw := tar.NewWriter(&huge)
	if err := tw.WriteHeader(&tar.Header{Name: "huge.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: 11 << 20}); err != nil {
		t.Fatal(err)
	}
	_ = tw.Flush() // The missing data makes Flush fail; the header is written.

	f.run(t, []biCase{
		{name: "parent traversal", method: "POST", path: "/api/v2/files", token: tok, body: biTar(t, good, biFile("../evil", "x")),
			contentType: tarCT, status: 400, message: outside, detail: "../evil"},
		{name: "nested traversal", method: "POST", path: "/api/v2/files", token: tok, body: biTar(t, good, biFile("modules/../../evil", "x")),
			contentType: tarCT, status: 400, message: outside},
		{name: "absolute path", method: "POST", path: "/api/v2/files", token: tok, body: biTar(t, good, biFile("/etc/evil", "x")),
			contentType: tarCT, status: 400, message: outside, detail: "absolute"},
		{name: "backslash", method: "POST", path: "/api/v2/files", token: tok, body: biTar(t, good, biFile(`..\evil`, "x")),
			contentType: tarCT, status: 400, message: outside},
		// Links are refused whatever their target, so the message names the
		// link rather than a path.
		{name: "symlink out of the folder", method: "POST", path: "/api/v2/files", token: tok,
			body:        biTar(t, good, biEntry{hdr: tar.Header{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: "../../../etc/passwd", Mode: 0o777}}),
			contentType: tarCT, status: 400, message: "link", detail: "../../../etc/passwd"},
		{name: "hard link", method: "POST", path: "/api/v2/files", token: tok,
			body:        biTar(t, good, biEntry{hdr: tar.Header{Name: "evil", Typeflag: tar.TypeLink, Linkname: "/etc/shadow", Mode: 0o644}}),
			contentType: tarCT, status: 400, message: "link"},
		{name: "over 10 MiB", method: "POST", path: "/api/v2/files", token: tok, body: make([]byte, 10<<20+1),
			contentType: tarCT, status: 413, message: "larger than"},
		{name: "declared size over 10 MiB", method: "POST", path: "/api/v2/files", token: tok, body: huge.Bytes(),
			contentType: tarCT, status: 413, message: "too large"},
		{name: "garbage", method: "POST", path: "/api/v2/files", token: tok, body: strings.Repeat("this is not a tar archive\n", 100),
			contentType: tarCT, status: 400, message: "not a tar archive"},
		{name: "no files", method: "POST", path: "/api/v2/files", token: tok,
			body:        biTar(t, biEntry{hdr: tar.Header{Name: "empty/", Typeflag: tar.TypeDir, Mode: 0o755}}),
			contentType: tarCT, status: 400, message: "no files"},
		{name: "empty body", method: "POST", path: "/api/v2/files", token: tok, contentType: tarCT, status: 400, message: "no files"},
		{name: "JSON content type", method: "POST", path: "/api/v2/files", token: tok, body: biTar(t, good),
			contentType: "application/json", status: 415, message: "Content-Type must be application/x-tar"},
		{name: "no content type", method: "POST", path: "/api/v2/files", token: tok, body: biTar(t, good),
			status: 415, message: "Content-Type must be application/x-tar"},
	})

	// None of the refused uploads was stored: a good one still gets 201.
	status, resp := coderdtest.Do(t, "POST", f.d.URL.String()+"/api/v2/files", tok, bytes.NewReader(biTar(t, good)), tarCT)
	if status != http.StatusCreated {
		t.Errorf("good upload: got %d, want 201: %s", status, resp)
	}
}

func TestBadInputWorkspaces(t *testing.T) {
	f := newBIFixture(t)
	ctx := context.Background()
	const jsonCT = "application/json"
	tok := f.owner.SessionToken

	// An idle workspace, built by the daemon.
	idle, err := f.owner.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: f.template.ID, Name: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	f.daemon.RunOne(t)
	// Versions whose import failed, of the template and of none.
	fail := func(templateID string) codersdk.TemplateVersion {
		v := coderdtest.UploadVersion(t, f.owner, templateID, coderdtest.MinimalTemplate, nil)
		j := f.daemon.Acquire(t, 10*time.Second)
		if j == nil || j.TemplateVersionID != v.ID {
			t.Fatalf("acquire: got %+v, want the import of %s", j, v.ID)
		}
		if err := f.daemon.Client.FailJob(ctx, f.daemon.ID, j.JobID, codersdk.FailJobRequest{Error: "terraform init: provider not found"}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	failed, failedLoose := fail(f.template.ID), fail("")
	// Versions left pending, and a workspace whose first build is pending:
	// nothing runs the queue from here on.
	pending := coderdtest.UploadVersion(t, f.owner, f.template.ID, coderdtest.MinimalTemplate, nil)
	pendingLoose := coderdtest.UploadVersion(t, f.owner, "", coderdtest.MinimalTemplate, nil)
	busy, err := f.owner.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: f.template.ID, Name: "busy"})
	if err != nil {
		t.Fatal(err)
	}

	workspace := func(name, versionID string) string {
		return `{"name":"` + name + `","template_version_id":"` + versionID + `"}`
	}
	template := func(name, versionID string) string {
		return `{"name":"` + name + `","template_version_id":"` + versionID + `"}`
	}
	f.run(t, []biCase{
		{name: "workspace from failed version", method: "POST", path: "/api/v2/users/me/workspaces", token: tok, body: workspace("from-failed", failed.ID),
			contentType: jsonCT, status: 400, message: "has not been imported successfully (its job is failed)", detail: "provider not found"},
		{name: "workspace from pending version", method: "POST", path: "/api/v2/users/me/workspaces", token: tok, body: workspace("from-pending", pending.ID),
			contentType: jsonCT, status: 400, message: "has not been imported successfully (its job is pending)"},
		{name: "template from failed version", method: "POST", path: "/api/v2/organizations/default/templates", token: tok, body: template("from-failed", failedLoose.ID),
			contentType: jsonCT, status: 400, message: "its job is failed"},
		{name: "template from pending version", method: "POST", path: "/api/v2/organizations/default/templates", token: tok, body: template("from-pending", pendingLoose.ID),
			contentType: jsonCT, status: 400, message: "its job is pending"},
		{name: "activate failed version", method: "PATCH", path: "/api/v2/templates/" + f.template.ID + "/versions", token: tok, body: `{"id":"` + failed.ID + `"}`,
			contentType: jsonCT, status: 400, message: "its job is failed"},
		{name: "build from failed version", method: "POST", path: "/api/v2/workspaces/" + idle.ID + "/builds", token: tok,
			body: `{"transition":"start","template_version_id":"` + failed.ID + `"}`, contentType: jsonCT, status: 400, message: "its job is failed"},
		{name: "second build while one is pending", method: "POST", path: "/api/v2/workspaces/" + busy.ID + "/builds", token: tok,
			body: `{"transition":"stop"}`, contentType: jsonCT, status: 409, message: "still pending"},
		{name: "unknown transition", method: "POST", path: "/api/v2/workspaces/" + idle.ID + "/builds", token: tok,
			body: `{"transition":"restart"}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "transition"},
		{name: "missing transition", method: "POST", path: "/api/v2/workspaces/" + idle.ID + "/builds", token: tok,
			body: `{}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "transition"},
		{name: "duplicate workspace name", method: "POST", path: "/api/v2/users/me/workspaces", token: tok,
			body: `{"name":"idle","template_id":"` + f.template.ID + `"}`, contentType: jsonCT, status: 409, message: "already exists"},
		{name: "invalid workspace name", method: "POST", path: "/api/v2/users/me/workspaces", token: tok,
			body: `{"name":"no spaces","template_id":"` + f.template.ID + `"}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "name"},
		{name: "cancel a finished build", method: "PATCH", path: "/api/v2/workspacebuilds/" + idle.LatestBuild.ID + "/cancel", token: tok,
			status: 400, message: "cannot be canceled"},
	})
}

func TestBadInputIDsAndRoutes(t *testing.T) {
	f := newBIFixture(t)
	const jsonCT = "application/json"
	tok := f.owner.SessionToken
	const bad = "not-a-uuid"
	v, err := f.owner.TemplateVersion(context.Background(), f.template.ActiveVersionID)
	if err != nil {
		t.Fatal(err)
	}
	fileID := v.Job.FileID
	cases := []biCase{
		{name: "workspace", method: "GET", path: "/api/v2/workspaces/" + bad},
		{name: "workspace builds", method: "GET", path: "/api/v2/workspaces/" + bad + "/builds"},
		{name: "workspace new build", method: "POST", path: "/api/v2/workspaces/" + bad + "/builds", body: `{"transition":"start"}`, contentType: jsonCT},
		{name: "build", method: "GET", path: "/api/v2/workspacebuilds/" + bad},
		{name: "build logs", method: "GET", path: "/api/v2/workspacebuilds/" + bad + "/logs"},
		{name: "build state", method: "GET", path: "/api/v2/workspacebuilds/" + bad + "/state"},
		{name: "build cancel", method: "PATCH", path: "/api/v2/workspacebuilds/" + bad + "/cancel"},
		{name: "template", method: "GET", path: "/api/v2/templates/" + bad},
		{name: "template delete", method: "DELETE", path: "/api/v2/templates/" + bad},
		{name: "template versions", method: "GET", path: "/api/v2/templates/" + bad + "/versions"},
		{name: "template version", method: "GET", path: "/api/v2/templateversions/" + bad},
		{name: "template version logs", method: "GET", path: "/api/v2/templateversions/" + bad + "/logs"},
		{name: "template version cancel", method: "PATCH", path: "/api/v2/templateversions/" + bad + "/cancel"},
		{name: "file", method: "GET", path: "/api/v2/files/" + bad},
		{name: "user", method: "GET", path: "/api/v2/users/" + bad},
		{name: "user roles", method: "PUT", path: "/api/v2/users/" + bad + "/roles", body: `{"roles":[]}`, contentType: jsonCT},
		{name: "user tokens", method: "GET", path: "/api/v2/users/" + bad + "/keys/tokens"},
		{name: "api key", method: "DELETE", path: "/api/v2/users/me/keys/" + bad},
		{name: "workspace by name", method: "GET", path: "/api/v2/users/me/workspace/" + bad},
		{name: "organization", method: "GET", path: "/api/v2/organizations/" + bad},
		{name: "template by name", method: "GET", path: "/api/v2/organizations/default/templates/" + bad},
		// Daemon endpoints, with the owner's token standing in for the PSK.
		{name: "daemon acquire", method: "POST", path: "/api/v2/provisionerdaemons/" + bad + "/acquire?wait=0s"},
		{name: "daemon job update", method: "POST", path: "/api/v2/provisionerdaemons/" + f.daemon.ID + "/jobs/" + bad + "/update",
			body: `{}`, contentType: jsonCT},
		{name: "daemon file", method: "GET", path: "/api/v2/provisionerdaemons/" + f.daemon.ID + "/files/" + bad},
	}
	for i := range cases {
		cases[i].token, cases[i].status, cases[i].message = tok, 404, "not found"
	}
	t.Run("bad UUIDs", func(t *testing.T) { f.run(t, cases) })

	// IDs in bodies are validation errors, not 404s or 500s.
	t.Run("bad UUIDs in bodies", func(t *testing.T) {
		f.run(t, []biCase{
			{name: "workspace template_id", method: "POST", path: "/api/v2/users/me/workspaces", token: tok,
				body: `{"name":"x","template_id":"` + bad + `"}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "template_id"},
			{name: "workspace template_version_id", method: "POST", path: "/api/v2/users/me/workspaces", token: tok,
				body: `{"name":"x","template_version_id":"` + bad + `"}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "template_version_id"},
			{name: "version file_id", method: "POST", path: "/api/v2/organizations/default/templateversions", token: tok,
				body: `{"storage_method":"file","provisioner":"terraform","file_id":"` + bad + `"}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "file_id"},
			{name: "version template_id", method: "POST", path: "/api/v2/organizations/default/templateversions", token: tok,
				body:        `{"storage_method":"file","provisioner":"terraform","file_id":"` + fileID + `","template_id":"` + bad + `"}`,
				contentType: jsonCT, status: 400, message: "Validation failed", field: "template_id"},
			{name: "active version id", method: "PATCH", path: "/api/v2/templates/" + f.template.ID + "/versions", token: tok,
				body: `{"id":"` + bad + `"}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "id"},
			{name: "template version id", method: "POST", path: "/api/v2/organizations/default/templates", token: tok,
				body: `{"name":"x","template_version_id":"` + bad + `"}`, contentType: jsonCT, status: 400, message: "Validation failed", field: "template_version_id"},
			{name: "list limit", method: "GET", path: "/api/v2/workspaces?limit=lots", token: tok, status: 400, message: "Validation failed", field: "limit"},
			{name: "list filter", method: "GET", path: "/api/v2/workspaces?q=colour:blue", token: tok, status: 400, message: "Validation failed", field: "q"},
		})
	})

	t.Run("routes", func(t *testing.T) {
		f.run(t, []biCase{
			{name: "unknown API route", method: "GET", path: "/api/v2/no-such-thing", status: 404, message: "Route /api/v2/no-such-thing not found"},
			{name: "unknown API route with token", method: "GET", path: "/api/v2/no-such-thing", token: tok, status: 404, message: "not found"},
			{name: "unknown route", method: "GET", path: "/no-such-thing", status: 404, message: "not found"},
			{name: "wrong method", method: "DELETE", path: "/api/v2/buildinfo", status: 405, message: "Method DELETE is not allowed"},
			{name: "wrong method behind auth", method: "PUT", path: "/api/v2/users", token: tok, status: 405, message: "Method PUT is not allowed"},
		})
		// Both answers are JSON, and a 405 says which methods the path takes.
		for _, r := range []struct{ method, path, allow string }{
			{"GET", "/api/v2/no-such-thing", ""},
			{"DELETE", "/api/v2/buildinfo", "GET"},
		} {
			req, err := http.NewRequest(r.method, f.d.URL.String()+r.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("%s %s: got Content-Type %q, want application/json", r.method, r.path, ct)
			}
			if got := resp.Header.Get("Allow"); got != r.allow {
				t.Errorf("%s %s: got Allow %q, want %q", r.method, r.path, got, r.allow)
			}
		}
	})
}
