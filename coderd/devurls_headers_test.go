package coderd_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testagent"
)

// newHeaderApp is the app in the workspace: it answers "ok" and records each
// request it gets. On /ws it accepts a WebSocket with coder/websocket's
// default origin check (the Origin's host must be the request's Host, as
// Jupyter and code-server check) and echoes one message.
func newHeaderApp(t *testing.T) *testagent.App {
	t.Helper()
	return testagent.NewApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/ws") {
			fmt.Fprintln(w, "ok")
			return
		}
		testagent.EchoWebSocket(w, r, nil, "echo: ") // answers 403 when Origin's host is not Host
	}))
}

// TestDevURLForwardedHeaders: a path-based dev URL (app by port, app by
// url, port) reaches the app with the visitor's Host, X-Forwarded-Host,
// -Proto and -For set by coderd (whatever the visitor sent), the path
// prefix in X-Forwarded-Prefix, the visitor's Origin and own cookies, and
// never coderd's session token or cookie. A WebSocket upgrade is rewritten
// the same way, so an app that checks Origin against Host accepts it. Over
// plain HTTP and over HTTPS, as an appliance serves.
func TestDevURLForwardedHeaders(t *testing.T) {
	t.Parallel()
	for _, tls := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP", true: "HTTPS"}[tls], func(t *testing.T) {
			t.Parallel()
			testDevURLForwardedHeaders(t, tls)
		})
	}
}

func testDevURLForwardedHeaders(t *testing.T, tls bool) {
	ctx := context.Background()
	app := newHeaderApp(t)
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk", TLS: tls,
		AgentHeartbeatInterval: 200 * time.Millisecond, AgentKeepAliveInterval: time.Second})
	owner, _ := d.CreateFirstUser(t)
	alice, _ := d.CreateUser(t, owner, "alice")
	token := uuid.NewString()
	w := coderdtest.CreateWorkspaceWithAgent(t, owner, alice, d.NewDaemon(t, "test", nil), "dev", codersdk.ProvisionedAgent{
		Token: token, Directory: t.TempDir(),
		Apps: []codersdk.ProvisionedApp{
			{Slug: "web", Port: int32(app.Port)},
			// An explicit url host gets the visitor's Host too, as in Coder.
			{Slug: "byurl", URL: fmt.Sprintf("http://localhost:%d/base/", app.Port)},
		},
	})
	agentID := coderdtest.WorkspaceAgent(t, w).ID
	startAgent(t, d, token)
	testagent.WaitConnected(t, alice, agentID)
	httpClient := d.Client().HTTPClient
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	origin := d.URL.Scheme + "://" + d.URL.Host // what a browser on the dashboard sends

	// checkHeaders checks what the app got for a request under prefix.
	checkHeaders := func(t *testing.T, got *http.Request, prefix string, viaCookie bool) {
		t.Helper()
		for _, h := range []struct{ name, got, want string }{
			{"Host", got.Host, d.URL.Host},
			{"Origin", got.Header.Get("Origin"), origin},
			{"X-Forwarded-Host", got.Header.Get("X-Forwarded-Host"), d.URL.Host},
			{"X-Forwarded-Proto", got.Header.Get("X-Forwarded-Proto"), d.URL.Scheme},
			{"X-Forwarded-For", strings.Join(got.Header.Values("X-Forwarded-For"), ", "), "127.0.0.1"},
			{"X-Forwarded-Prefix", strings.Join(got.Header.Values("X-Forwarded-Prefix"), ", "), prefix},
			{"Forwarded", got.Header.Get("Forwarded"), ""},
			{codersdk.SessionTokenHeader, got.Header.Get(codersdk.SessionTokenHeader), ""},
		} {
			if h.got != h.want {
				t.Errorf("the app got %s %q, want %q", h.name, h.got, h.want)
			}
		}
		cookies := got.Header.Get("Cookie")
		if strings.Contains(cookies, codersdk.SessionTokenCookie) || strings.Contains(cookies, alice.SessionToken) {
			t.Errorf("coderd's session cookie reached the app: Cookie %q", cookies)
		}
		if viaCookie && cookies != "app_cookie=kept" {
			t.Errorf("the app got Cookie %q, want only its own app_cookie=kept", cookies)
		}
	}
	// visitorHeaders are a browser's headers on the dashboard's origin,
	// with forwarding headers a visitor made up.
	visitorHeaders := func(viaCookie bool) http.Header {
		h := http.Header{
			"Origin":             {origin},
			"X-Forwarded-For":    {"203.0.113.9"},
			"X-Forwarded-Host":   {"evil.example"},
			"X-Forwarded-Proto":  {"gopher"},
			"X-Forwarded-Prefix": {"/elsewhere"},
			"Forwarded":          {"for=203.0.113.9;host=evil.example"},
		}
		if viaCookie {
			h.Set("Cookie", codersdk.SessionTokenCookie+"="+alice.SessionToken+"; app_cookie=kept")
		} else {
			h.Set(codersdk.SessionTokenHeader, alice.SessionToken)
		}
		return h
	}

	for _, tc := range []struct {
		name, prefix, appPath string // appPath: where the app sees "/x"
	}{
		{"app by port", "/@alice/dev/apps/web", ""},
		{"app by url", "/@alice/dev/apps/byurl", "/base"},
		{"port", fmt.Sprintf("/@alice/dev/ports/%d", app.Port), ""},
	} {
		for _, viaCookie := range []bool{false, true} {
			name := tc.name + map[bool]string{false: " by header", true: " by cookie"}[viaCookie]
			t.Run(name, func(t *testing.T) {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL.String()+tc.prefix+"/x", strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				req.Header = visitorHeaders(viaCookie)
				resp, err := httpClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("POST %s/x: got %d, want 200", tc.prefix, resp.StatusCode)
				}
				checkHeaders(t, app.Request(t, tc.appPath+"/x"), tc.prefix, viaCookie)
			})
			t.Run(name+" WebSocket", func(t *testing.T) {
				u, _ := url.Parse(d.URL.String() + tc.prefix + "/ws")
				u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
				dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				opts := &websocket.DialOptions{HTTPClient: httpClient, HTTPHeader: visitorHeaders(viaCookie)}
				if got := testagent.WebSocketRoundTrip(dctx, t, u.String(), opts, websocket.MessageText, "ping"); got != "echo: ping" {
					t.Errorf("WebSocket echo: got %q, want %q", got, "echo: ping")
				}
				checkHeaders(t, app.Request(t, tc.appPath+"/ws"), tc.prefix, viaCookie)
			})
		}
	}
}
