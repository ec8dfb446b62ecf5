package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/pkg/sftp"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"airgapcoder/agent"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testagent"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testwait"
	"airgapcoder/relayconn"
)

// relayEnv is a deployment with users, a workspace of alice's whose agent
// runs in this process, and an app server the agent can reach.
type relayEnv struct {
	d                     *coderdtest.Deployment
	admin, member, tadmin *codersdk.Client
	alice                 *codersdk.Client
	workspace             codersdk.Workspace
	agentID, token, dir   string
	appPort               int
	app                   *httptest.Server
	stopAgent             func()
	deploymentOpts        coderdtest.Options
	daemon                *coderdtest.Daemon
	metrics               *prometheus.Registry // the deployment's
}

// appServer answers / with what it received (path, Host, headers) and
// echoes WebSocket messages on /ws.
func appServer(t testing.TB) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), msg...)); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("set-cookies") {
			http.SetCookie(w, &http.Cookie{Name: codersdk.SessionTokenCookie, Value: "from-the-app", Path: "/"})
			http.SetCookie(w, &http.Cookie{Name: "app_cookie", Value: "set"})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(appEcho{Path: r.URL.RequestURI(), Host: r.Host, Header: r.Header})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

type appEcho struct {
	Path   string      `json:"path"`
	Host   string      `json:"host"`
	Header http.Header `json:"header"`
}

// newRelayEnv starts the deployment and the agent; agentOpts adjust the
// agent's options.
func newRelayEnv(t testing.TB, agentOpts ...func(*agent.Options)) *relayEnv {
	t.Helper()
	return newRelayEnvTLS(t, false, agentOpts...)
}

// newRelayEnvTLS is newRelayEnv, over HTTPS (as appliances serve) when tls
// is set.
func newRelayEnvTLS(t testing.TB, tls bool, agentOpts ...func(*agent.Options)) *relayEnv {
	t.Helper()
	e := &relayEnv{app: appServer(t), token: uuid.NewString(), dir: t.TempDir(), metrics: prometheus.NewRegistry()}
	_, port, _ := net.SplitHostPort(e.app.Listener.Addr().String())
	e.appPort, _ = strconv.Atoi(port)
	e.deploymentOpts = coderdtest.Options{ProvisionerPSK: "psk", AgentHeartbeatInterval: 200 * time.Millisecond, AgentKeepAliveInterval: time.Second, TLS: tls,
		Registerer: e.metrics}
	e.d = coderdtest.New(t, e.deploymentOpts)
	e.admin, _ = e.d.CreateFirstUser(t)
	e.member, _ = e.d.CreateUser(t, e.admin, "member")
	e.tadmin, _ = e.d.CreateUser(t, e.admin, "tadmin", codersdk.RoleTemplateAdmin)
	e.alice, _ = e.d.CreateUser(t, e.admin, "alice")
	e.daemon = e.d.NewDaemon(t, "test", nil)
	e.workspace = coderdtest.CreateWorkspaceWithAgent(t, e.admin, e.alice, e.daemon, "dev", codersdk.ProvisionedAgent{
		Token: e.token, Directory: e.dir, Env: map[string]string{"FROM_TEMPLATE": "yes"},
		Scripts: []codersdk.AgentScript{{DisplayName: codersdk.ScriptStartupDisplayName, RunOnStart: true,
			Script: "echo startup says hello\necho to stderr >&2\n"}},
		Apps: []codersdk.ProvisionedApp{
			{Slug: "web", Port: int32(e.appPort)},
			{Slug: "byurl", URL: fmt.Sprintf("http://localhost:%d/base/?fixed=1", e.appPort)},
			{Slug: "pub", Port: int32(e.appPort), Share: "public"},
		},
	})
	e.agentID = coderdtest.WorkspaceAgent(t, e.workspace).ID
	e.startAgent(t, agentOpts...)
	return e
}

// startAgent runs the agent in this process until the test ends.
func (e *relayEnv) startAgent(t testing.TB, agentOpts ...func(*agent.Options)) {
	t.Helper()
	c := e.d.Client() // trusts the deployment's certificate over HTTPS
	c.SessionToken = e.token
	opts := agent.Options{
		Client: c, Version: "v9.9.9-test", PortsInterval: 200 * time.Millisecond, KeepAliveInterval: time.Second,
		ReconnectMin: 100 * time.Millisecond, ReconnectMax: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, f := range agentOpts {
		f(&opts)
	}
	e.stopAgent = testagent.Start(t, opts)
}

func (e *relayEnv) waitReady(t testing.TB, c *codersdk.Client) codersdk.WorkspaceAgent {
	t.Helper()
	var a codersdk.WorkspaceAgent
	testwait.For(t, 30*time.Second, "the agent ready", func() (bool, string) {
		var err error
		a, err = c.WorkspaceAgent(context.Background(), e.agentID)
		if err != nil {
			return false, err.Error()
		}
		return a.Status == codersdk.AgentStatusConnected && a.LifecycleState == codersdk.AgentLifecycleReady,
			fmt.Sprintf("agent status %s, lifecycle %s", a.Status, a.LifecycleState)
	})
	return a
}

// sshClient opens an SSH client to the agent through the relay as c.
func sshClient(t *testing.T, c *codersdk.Client, agentID string) *ssh.Client {
	t.Helper()
	conn, err := c.DialWorkspaceAgent(context.Background(), agentID, codersdk.DialOptions{Kind: codersdk.RelayKindSSH})
	if err != nil {
		t.Fatalf("dial agent: %v", err)
	}
	sconn, chans, reqs, err := ssh.NewClientConn(conn, "dev", &ssh.ClientConfig{User: "alice", HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatalf("ssh handshake: %v", err)
	}
	client := ssh.NewClient(sconn, chans, reqs)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// run runs command in a new session and returns stdout, stderr and the
// exit code.
func run(t *testing.T, client *ssh.Client, stdin, command string) (string, string, int) {
	t.Helper()
	sess, err := client.NewSession()
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	defer sess.Close()
	var stdout, stderr bytes.Buffer
	sess.Stdin, sess.Stdout, sess.Stderr = strings.NewReader(stdin), &stdout, &stderr
	err = sess.Run(command)
	code := 0
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitStatus()
	} else if err != nil {
		t.Fatalf("run %q: %v", command, err)
	}
	return stdout.String(), stderr.String(), code
}

func TestRelay(t *testing.T) {
	e := newRelayEnv(t)
	ctx := context.Background()
	a := e.waitReady(t, e.alice)

	t.Run("AgentReport", func(t *testing.T) {
		// The startup report and the start scripts go concurrently: ready
		// may arrive first.
		testwait.For(t, 10*time.Second, "the startup report and ready", func() (bool, string) {
			a, err := e.alice.WorkspaceAgent(ctx, e.agentID)
			if err != nil {
				return false, err.Error()
			}
			return a.Version == "v9.9.9-test" && a.OperatingSystem == "linux" && a.ExpandedDirectory == e.dir,
				fmt.Sprintf("got version %q os %q dir %q, want v9.9.9-test linux %s", a.Version, a.OperatingSystem, a.ExpandedDirectory, e.dir)
		})
		if a.FirstConnectedAt == nil || a.LastConnectedAt == nil {
			t.Errorf("connection times not recorded: %+v", a)
		}
		testwait.For(t, 10*time.Second, "the agent's connection times", func() (bool, string) {
			a, err := e.alice.WorkspaceAgent(ctx, e.agentID)
			if err != nil {
				return false, err.Error()
			}
			return slices.ContainsFunc(a.ListeningPorts, func(p codersdk.AgentListeningPort) bool { return int(p.Port) == e.appPort }),
				fmt.Sprintf("listening ports %v lack the app's %d", a.ListeningPorts, e.appPort)
		})
		w, err := e.alice.Workspace(ctx, e.workspace.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got := coderdtest.WorkspaceAgent(t, w); got.Status != codersdk.AgentStatusConnected || got.Version != "v9.9.9-test" {
			t.Errorf("workspace view of the agent: status %s version %q", got.Status, got.Version)
		}
	})

	t.Run("StartupLogs", func(t *testing.T) {
		testwait.For(t, 10*time.Second, "the startup logs", func() (bool, string) {
			logs, err := e.alice.WorkspaceAgentLogs(ctx, e.agentID, 0)
			if err != nil {
				return false, err.Error()
			}
			var lines []string
			for _, l := range logs {
				lines = append(lines, l.Output)
			}
			return slices.Contains(lines, "startup says hello") && slices.Contains(lines, "to stderr"), fmt.Sprintf("agent logs %q", lines)
		})
		var stage []string
		err := e.alice.WorkspaceBuildLogs(ctx, e.workspace.LatestBuild.ID, 0, false, func(l codersdk.ProvisionerJobLog) error {
			if l.Stage == codersdk.StageStartupScript {
				stage = append(stage, l.Output)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(stage, "startup says hello") {
			t.Errorf("build logs under stage %q: %q, want the startup script's output", codersdk.StageStartupScript, stage)
		}
		if _, err := e.member.WorkspaceAgentLogs(ctx, e.agentID, 0); !codersdk.IsStatus(err, http.StatusNotFound) {
			t.Errorf("another member reading the logs: got %v, want 404", err)
		}
	})

	t.Run("SSHExec", func(t *testing.T) {
		client := sshClient(t, e.alice, e.agentID)
		out, _, code := run(t, client, "", `echo hello; echo "$FROM_TEMPLATE"; pwd; echo "${CODER_AGENT_TOKEN:-no token}"; echo "$CODER_WORKSPACE_NAME"`)
		want := "hello\nyes\n" + e.dir + "\nno token\ndev\n"
		if code != 0 || out != want {
			t.Errorf("got exit %d output %q, want 0 and %q", code, out, want)
		}
		if _, _, code := run(t, client, "", "exit 7"); code != 7 {
			t.Errorf("exit 7: got code %d", code)
		}
		out, errOut, _ := run(t, client, "from stdin", "cat; echo oops >&2")
		if out != "from stdin" || errOut != "oops\n" {
			t.Errorf("stdin/stderr: got stdout %q stderr %q", out, errOut)
		}
		// A background process holding stdout does not hold the session.
		began := time.Now()
		if out, _, code := run(t, client, "", "sleep 10 & echo started"); code != 0 || out != "started\n" {
			t.Errorf("background: got %d %q", code, out)
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("a session whose command left a background process took %s", took)
		}
	})

	t.Run("SSHPTY", func(t *testing.T) {
		client := sshClient(t, e.alice, e.agentID)
		sess, err := client.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		if err := sess.RequestPty("xterm", 40, 120, ssh.TerminalModes{}); err != nil {
			t.Fatal(err)
		}
		stdin, _ := sess.StdinPipe()
		var out syncbuf.Buffer
		sess.Stdout = &out
		if err := sess.Shell(); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(stdin, "stty size; tty; echo TERM=$TERM")
		testwait.For(t, 10*time.Second, "the terminal's size, tty and TERM", func() (bool, string) {
			s := out.String()
			return strings.Contains(s, "40 120") && strings.Contains(s, "/dev/pts/") && strings.Contains(s, "TERM=xterm"), fmt.Sprintf("output %q", s)
		})
		if err := sess.WindowChange(50, 100); err != nil {
			t.Fatal(err)
		}
		// The window change reaches the shell's terminal on its own: ask
		// until it shows.
		testwait.For(t, 10*time.Second, "the resized terminal", func() (bool, string) {
			fmt.Fprintln(stdin, "stty size")
			return strings.Contains(out.String(), "50 100"), fmt.Sprintf("output %q", out.String())
		})
		fmt.Fprintln(stdin, "exit 3")
		var ee *ssh.ExitError
		if err := sess.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 3 {
			t.Errorf("shell exit: got %v, want status 3", err)
		}
	})

	t.Run("SFTP", func(t *testing.T) {
		client := sshClient(t, e.alice, e.agentID)
		sc, err := sftp.NewClient(client)
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		f, err := sc.Create("uploaded.txt")
		if err != nil {
			t.Fatal(err)
		}
		payload := bytes.Repeat([]byte("0123456789"), 100000)
		if _, err := f.Write(payload); err != nil {
			t.Fatal(err)
		}
		f.Close()
		// Relative paths are under the agent's directory.
		out, _, _ := run(t, client, "", "wc -c < "+e.dir+"/uploaded.txt")
		if strings.TrimSpace(out) != strconv.Itoa(len(payload)) {
			t.Errorf("uploaded file size in the workspace: %q, want %d", out, len(payload))
		}
		rf, err := sc.Open("uploaded.txt")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rf)
		rf.Close()
		if !bytes.Equal(got, payload) {
			t.Errorf("downloaded %d bytes, want the %d uploaded", len(got), len(payload))
		}
	})

	t.Run("DirectTCPIP", func(t *testing.T) {
		client := sshClient(t, e.alice, e.agentID)
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return client.Dial("tcp", addr)
		}}}
		resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/through-ssh", e.appPort))
		if err != nil {
			t.Fatal(err)
		}
		var got appEcho
		_ = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if got.Path != "/through-ssh" {
			t.Errorf("got path %q", got.Path)
		}
	})

	t.Run("TCP", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				conn, err := e.alice.DialWorkspaceAgent(ctx, e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(e.appPort)})
				if err != nil {
					t.Errorf("dial %d: %v", i, err)
					return
				}
				defer conn.Close()
				fmt.Fprintf(conn, "GET /conn/%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", i)
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Errorf("conn %d: %v", i, err)
					return
				}
				var got appEcho
				_ = json.NewDecoder(resp.Body).Decode(&got)
				if got.Path != fmt.Sprintf("/conn/%d", i) {
					t.Errorf("conn %d: got path %q", i, got.Path)
				}
			})
		}
		wg.Wait()
		closed := freePort(t)
		_, err := e.alice.DialWorkspaceAgent(ctx, e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(closed)})
		if !codersdk.IsStatus(err, http.StatusBadGateway) || !strings.Contains(err.Error(), "refused") {
			t.Errorf("dial a closed port: got %v, want 502 connection refused", err)
		}
	})

	t.Run("WhoMayConnect", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			client *codersdk.Client
			want   int
		}{
			{"another member", e.member, http.StatusNotFound},
			{"template admin", e.tadmin, http.StatusForbidden},
			{"unauthenticated", e.d.Client(), http.StatusUnauthorized},
		} {
			_, err := tc.client.DialWorkspaceAgent(ctx, e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindSSH})
			if !codersdk.IsStatus(err, tc.want) {
				t.Errorf("%s: got %v, want %d", tc.name, err, tc.want)
			}
		}
		// Users with the owner role may.
		client := sshClient(t, e.admin, e.agentID)
		if out, _, _ := run(t, client, "", "echo admin"); out != "admin\n" {
			t.Errorf("owner-role user: got %q", out)
		}
	})

	t.Run("TokensStayInTheirLane", func(t *testing.T) {
		status, body := coderdtest.Do(t, http.MethodGet, e.d.URL.String()+"/api/v2/users/me", e.token, nil, "")
		if status != http.StatusUnauthorized {
			t.Errorf("agent token on a user endpoint: %s, want 401", coderdtest.String(status, body))
		}
		status, body = coderdtest.Do(t, http.MethodGet, e.d.URL.String()+"/api/v2/workspaceagents/me/manifest", e.alice.SessionToken, nil, "")
		if status != http.StatusUnauthorized {
			t.Errorf("user token on an agent endpoint: %s, want 401", coderdtest.String(status, body))
		}
		status, body = coderdtest.Do(t, http.MethodGet, e.d.URL.String()+"/api/v2/workspaceagents/me/manifest", uuid.NewString(), nil, "")
		if status != http.StatusUnauthorized {
			t.Errorf("unknown agent token: %s, want 401", coderdtest.String(status, body))
		}
		status, body = coderdtest.Do(t, http.MethodGet, e.d.URL.String()+"/api/v2/workspaceagents/me/manifest", e.token, nil, "")
		if status != http.StatusOK || !strings.Contains(string(body), `"scripts"`) {
			t.Errorf("agent token on its manifest: %s", coderdtest.String(status, body))
		}
	})

	t.Run("DevURLs", func(t *testing.T) {
		base := e.d.URL.String() + "/@alice/dev"
		get := func(path, token string, cookie bool) (int, appEcho, http.Header) {
			req, _ := http.NewRequest(http.MethodGet, base+path, nil)
			if token != "" && cookie {
				req.AddCookie(&http.Cookie{Name: codersdk.SessionTokenCookie, Value: token})
				req.AddCookie(&http.Cookie{Name: "app_cookie", Value: "kept"})
			} else if token != "" {
				req.Header.Set(codersdk.SessionTokenHeader, token)
			}
			c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			defer resp.Body.Close()
			var got appEcho
			if resp.StatusCode == http.StatusOK {
				_ = json.NewDecoder(resp.Body).Decode(&got)
			}
			return resp.StatusCode, got, resp.Header
		}
		portPath := fmt.Sprintf("/ports/%d", e.appPort)
		for _, tc := range []struct {
			name, path, token string
			cookie            bool
			want              int
			wantPath          string
		}{
			{"owner by header", portPath + "/hello?q=1", e.alice.SessionToken, false, 200, "/hello?q=1"},
			{"owner by cookie", portPath + "/c", e.alice.SessionToken, true, 200, "/c"},
			{"owner-role user", portPath + "/", e.admin.SessionToken, false, 200, "/"},
			{"no token", portPath + "/", "", false, 401, ""},
			{"another member", portPath + "/", e.member.SessionToken, false, 404, ""},
			{"template admin", portPath + "/", e.tadmin.SessionToken, false, 403, ""},
			{"agent token", portPath + "/", e.token, false, 401, ""},
			{"app by port", "/apps/web/x/y", e.alice.SessionToken, false, 200, "/x/y"},
			{"app by url", "/apps/byurl/z?b=2", e.alice.SessionToken, false, 200, "/base/z?fixed=1&b=2"},
			{"owner-role user by cookie", portPath + "/", e.admin.SessionToken, true, 403, ""},
			{"share=public is not honored", "/apps/pub/p", "", false, 401, ""},
			{"share=public, another member", "/apps/pub/p", e.member.SessionToken, false, 404, ""},
			{"no such app", "/apps/nope/", e.alice.SessionToken, false, 404, ""},
			{"no such app, anonymous", "/apps/nope/", "", false, 401, ""},
			{"redirect to the slash", "/apps/web", e.alice.SessionToken, false, 307, ""},
			{"closed port", fmt.Sprintf("/ports/%d/", freePort(t)), e.alice.SessionToken, false, 502, ""},
		} {
			status, got, hdr := get(tc.path, tc.token, tc.cookie)
			if status != tc.want {
				t.Errorf("%s: GET %s: got %d, want %d", tc.name, tc.path, status, tc.want)
				continue
			}
			if status == 307 && hdr.Get("Location") != "/@alice/dev/apps/web/" {
				t.Errorf("%s: redirected to %q", tc.name, hdr.Get("Location"))
			}
			if status != 200 {
				continue
			}
			if got.Path != tc.wantPath {
				t.Errorf("%s: the app got path %q, want %q", tc.name, got.Path, tc.wantPath)
			}
			if got.Header.Get(codersdk.SessionTokenHeader) != "" || strings.Contains(got.Header.Get("Cookie"), codersdk.SessionTokenCookie) {
				t.Errorf("%s: the session token reached the app: %v", tc.name, got.Header)
			}
			if tc.cookie && !strings.Contains(got.Header.Get("Cookie"), "app_cookie=kept") {
				t.Errorf("%s: the app's own cookie was lost: %q", tc.name, got.Header.Get("Cookie"))
			}
		}
		_, _, hdr := get("/apps/web/?set-cookies", e.alice.SessionToken, false)
		if sc := strings.Join(hdr.Values("Set-Cookie"), "; "); !strings.Contains(sc, "app_cookie=set") || strings.Contains(sc, codersdk.SessionTokenCookie) {
			t.Errorf("Set-Cookie from the app: %q, want its own cookie and no session cookie", sc)
		}
		// The app gets the visitor's Host, even with a host in its url
		// (as in Coder; coderd's TestDevURLForwardedHeaders has the rest).
		_, got, _ := get("/apps/byurl/", e.alice.SessionToken, false)
		if got.Host != e.d.URL.Host || got.Header.Get("X-Forwarded-Prefix") != "/@alice/dev/apps/byurl" {
			t.Errorf("app by url: Host %q, X-Forwarded-Prefix %q; want Host %q", got.Host, got.Header.Get("X-Forwarded-Prefix"), e.d.URL.Host)
		}

		// WebSockets go through too.
		u, _ := url.Parse(base + portPath + "/ws")
		u.Scheme = "ws"
		c, _, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPHeader: http.Header{codersdk.SessionTokenHeader: {e.alice.SessionToken}}})
		if err != nil {
			t.Fatalf("websocket through a dev URL: %v", err)
		}
		defer c.CloseNow()
		if err := c.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		_, msg, err := c.Read(ctx)
		if err != nil || string(msg) != "echo: ping" {
			t.Errorf("websocket echo: got %q, %v", msg, err)
		}
	})

	t.Run("ShutdownReportsOff", func(t *testing.T) {
		e.stopAgent()
		testwait.For(t, 10*time.Second, "the agent reported off", func() (bool, string) {
			a, err := e.alice.WorkspaceAgent(ctx, e.agentID)
			if err != nil {
				return false, err.Error()
			}
			return a.LifecycleState == codersdk.AgentLifecycleOff && a.Status == codersdk.AgentStatusDisconnected,
				fmt.Sprintf("lifecycle %s, status %s", a.LifecycleState, a.Status)
		})
		_, err := e.alice.DialWorkspaceAgent(ctx, e.agentID, codersdk.DialOptions{})
		if !codersdk.IsAgentUnavailable(err) {
			t.Errorf("dial a stopped agent: got %v, want 503", err)
		}
	})
}

// TestAgentReconnects stops coderd and starts it again on the same address
// and database: the agent comes back within seconds.
func TestAgentReconnects(t *testing.T) {
	e := newRelayEnv(t)
	e.waitReady(t, e.alice)
	addr := e.d.URL.Host
	e.d.Close()
	opts := e.deploymentOpts
	opts.DatabaseURL, opts.Address = e.d.DatabaseURL, addr
	opts.Registerer = prometheus.NewRegistry()
	began := time.Now()
	d2 := coderdtest.New(t, opts)
	alice := d2.Client()
	alice.SessionToken = e.alice.SessionToken
	testwait.For(t, 15*time.Second, "an SSH connection through the second replica", func() (bool, string) {
		conn, err := alice.DialWorkspaceAgent(context.Background(), e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindSSH})
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
	t.Logf("agent reachable %s after coderd came back", time.Since(began).Round(time.Millisecond))
	client := sshClient(t, alice, e.agentID)
	if out, _, code := run(t, client, "", "echo back"); out != "back\n" || code != 0 {
		t.Errorf("after reconnect: got %d %q", code, out)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	return testport.Port(t)
}

// upgradeProxy is a reverse proxy in front of coderd that records the
// Upgrade header of every request and, when websocketOnly, refuses other
// upgrades as some proxies and load balancers do.
func upgradeProxy(t *testing.T, target *url.URL, websocketOnly bool) (*url.URL, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up := r.Header.Get("Upgrade")
		if up != "" {
			mu.Lock()
			seen = append(seen, up)
			mu.Unlock()
		}
		if websocketOnly && up != "" && !strings.EqualFold(up, "websocket") {
			http.Error(w, "this proxy passes only WebSocket upgrades", http.StatusBadRequest)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// TestRelayTransports checks how clients reach the relay: a raw upgraded
// connection by default, a WebSocket when a proxy refuses other upgrades,
// coderd's own refusals reported as such, and a connection that outlives
// the context of its dial.
func TestRelayTransports(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	e.waitReady(t, e.alice)
	port := uint16(coderdtest.EchoServer(t))
	echo := func(c *codersdk.Client, ctx context.Context) error {
		conn, err := c.DialWorkspaceAgent(ctx, e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: port})
		if err != nil {
			return err
		}
		defer conn.Close()
		msg := bytes.Repeat([]byte("relay "), 100_000)
		go func() { _, _ = conn.Write(msg) }()
		got := make([]byte, len(msg))
		if err := conn.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
			return fmt.Errorf("set deadline: %w", err)
		}
		if _, err := io.ReadFull(conn, got); err != nil {
			return fmt.Errorf("read echo: %w", err)
		}
		if !bytes.Equal(got, msg) {
			return errors.New("echo differs")
		}
		return nil
	}
	via := func(u *url.URL, token string) *codersdk.Client {
		c := codersdk.New(u)
		c.SessionToken = token
		return c
	}

	t.Run("raw upgrade", func(t *testing.T) {
		u, seen := upgradeProxy(t, e.d.URL, false)
		if err := echo(via(u, e.alice.SessionToken), context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := seen(); !slices.Equal(got, []string{relayconn.Protocol}) {
			t.Errorf("upgrades seen by the proxy: %q, want one %s", got, relayconn.Protocol)
		}
	})
	t.Run("over TLS where the server offers HTTP/2", func(t *testing.T) {
		var mu sync.Mutex
		var seen []string
		rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(e.d.URL) }}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, r.Proto+" "+r.Header.Get("Upgrade"))
			mu.Unlock()
			rp.ServeHTTP(w, r)
		}))
		srv.EnableHTTP2 = true
		srv.StartTLS()
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		c := via(u, e.alice.SessionToken)
		// A TLS configuration that offers h2, as the trust store's does.
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.NextProtos = []string{"h2", "http/1.1"}
		c.HTTPClient = &http.Client{Transport: tr}
		if err := echo(c, context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(seen, []string{"HTTP/1.1 " + relayconn.Protocol}) {
			t.Errorf("requests seen by the TLS proxy: %q, want one HTTP/1.1 upgrade to %s", seen, relayconn.Protocol)
		}
	})
	t.Run("websocket-only proxy", func(t *testing.T) {
		u, seen := upgradeProxy(t, e.d.URL, true)
		if err := echo(via(u, e.alice.SessionToken), context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := seen(); !slices.Equal(got, []string{relayconn.Protocol, "websocket"}) {
			t.Errorf("upgrades seen by the proxy: %q, want %s refused, then websocket", got, relayconn.Protocol)
		}
	})
	t.Run("coderd refuses", func(t *testing.T) {
		u, seen := upgradeProxy(t, e.d.URL, false)
		err := echo(via(u, e.member.SessionToken), context.Background())
		if !codersdk.IsStatus(err, http.StatusForbidden) && !codersdk.IsStatus(err, http.StatusNotFound) {
			t.Fatalf("another user's workspace: %v, want coderd's 403 or 404", err)
		}
		if got := seen(); len(got) != 1 {
			t.Errorf("upgrades seen by the proxy: %q: coderd's refusal must not be retried as a WebSocket", got)
		}
	})
	t.Run("outlives its dial context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		conn, err := e.alice.DialWorkspaceAgent(ctx, e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: port})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cancel()
		time.Sleep(100 * time.Millisecond) // proves a negative: the canceled dial context does not close the connection
		if _, err := conn.Write([]byte("still here")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len("still here"))
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(conn, got); err != nil || string(got) != "still here" {
			t.Fatalf("after the dial context ended: %q %v", got, err)
		}
	})
}

// TestRelayOverTLS: over HTTPS, where relay connections fill their reads
// and send each write's TLS records in one syscall on every hop (the
// user's connection and the agent's, at both ends), megabytes cross both
// ways at once, in order, with small writes mixed in, and an SSH session
// runs a command.
func TestRelayOverTLS(t *testing.T) {
	t.Parallel()
	e := newRelayEnvTLS(t, true)
	if e.d.URL.Scheme != "https" {
		t.Fatalf("deployment at %s, want https", e.d.URL)
	}
	e.waitReady(t, e.alice)
	conn := e.dialPort(t, e.alice, uint16(coderdtest.EchoServer(t)))
	msg := make([]byte, 4<<20)
	for i := range msg {
		msg[i] = byte(i*31 + i>>16)
	}
	writeErr := make(chan error, 1)
	go func() {
		var err error
		for rest, i := msg, 0; len(rest) > 0 && err == nil; i++ {
			n := min(len(rest), []int{1, 700, 64 << 10, 300 << 10, 1 << 20}[i%5])
			_, err = conn.Write(rest[:n])
			rest = rest[n:]
		}
		writeErr <- err
	}()
	got := make([]byte, len(msg))
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("read the echo: %v", err)
	}
	if err := <-writeErr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("the echo differs from what was sent")
	}
	sc := sshClient(t, e.alice, e.agentID)
	if out, _, code := run(t, sc, "", "echo over tls"); out != "over tls\n" || code != 0 {
		t.Fatalf("ssh over TLS: %q, exit %d", out, code)
	}
	// Megabytes of stdin, which the agent reads many packets at a time.
	in := strings.Repeat("0123456789abcdef", 256<<10) // 4 MiB
	if out, _, code := run(t, sc, in, "sha256sum"); code != 0 || !strings.HasPrefix(out, fmt.Sprintf("%x ", sha256.Sum256([]byte(in)))) {
		t.Fatalf("sha256sum of 4 MiB of stdin over ssh: %q, exit %d", out, code)
	}
}

// TestRelayAcrossReplicas runs a second replica (B) on the deployment's
// database: the agent is connected to the first (A), and a user who
// reaches B gets SSH, a forwarded port and a dev URL through B → A. When
// the agent goes away, B says so at once.
func TestRelayAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	e.waitReady(t, e.alice)
	b := coderdtest.New(t, coderdtest.Options{DatabaseURL: e.d.DatabaseURL, AgentHeartbeatInterval: 200 * time.Millisecond})
	viaB := codersdk.New(b.URL)
	viaB.SessionToken = e.alice.SessionToken
	ctx := context.Background()

	a, err := e.d.DB.AgentByID(ctx, e.agentID)
	if err != nil {
		t.Fatal(err)
	}
	if a.ConnectedReplicaID == "" || a.ConnectedReplicaID != e.d.API.ReplicaID() {
		t.Fatalf("the agent's row names replica %q, want A's %q", a.ConnectedReplicaID, e.d.API.ReplicaID())
	}
	testwait.For(t, 10*time.Second, "the replicas as B sees them", func() (bool, string) {
		rs, err := viaB.Replicas(ctx)
		if codersdk.IsStatus(err, http.StatusForbidden) {
			admin := codersdk.New(b.URL)
			admin.SessionToken = e.admin.SessionToken
			rs, err = admin.Replicas(ctx)
		}
		return err == nil && len(rs) == 2, fmt.Sprintf("replicas %v (%v)", rs, err)
	})

	// The agent's spare connections belong where its session is.
	agentViaB := codersdk.New(b.URL)
	agentViaB.SessionToken = e.token
	if c, err := agentViaB.ConnectAgentSpare(ctx); !codersdk.IsStatus(err, http.StatusConflict) {
		if c != nil {
			c.Close()
		}
		t.Errorf("a spare connection to replica B, which the agent's session is not on: %v, want 409", err)
	}

	// A forwarded port, through B.
	port := uint16(coderdtest.EchoServer(t))
	conn, err := viaB.DialWorkspaceAgent(ctx, e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: port})
	if err != nil {
		t.Fatalf("dial the agent through replica B: %v", err)
	}
	msg := bytes.Repeat([]byte("across replicas "), 50_000)
	go func() { _, _ = conn.Write(msg) }()
	got := make([]byte, len(msg))
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo through B: %v (equal %v)", err, bytes.Equal(got, msg))
	}
	conn.Close()

	// SSH, through B.
	client := sshClient(t, viaB, e.agentID)
	if out, _, code := run(t, client, "", "echo $FROM_TEMPLATE"); code != 0 || strings.TrimSpace(out) != "yes" {
		t.Errorf("ssh through B: %q, exit %d", out, code)
	}
	client.Close()

	// A dev URL, through B.
	req, _ := http.NewRequest(http.MethodGet, b.URL.String()+"/@alice/dev/apps/web/through-b", nil)
	req.Header.Set(codersdk.SessionTokenHeader, e.alice.SessionToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "/through-b") {
		t.Errorf("dev URL through B: %d %s", resp.StatusCode, body)
	}

	// A refused port is the agent's refusal, carried back through A.
	if _, err := viaB.DialWorkspaceAgent(ctx, e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(freePort(t))}); !codersdk.IsStatus(err, http.StatusBadGateway) {
		t.Errorf("a closed port through B: %v, want 502 from the agent", err)
	}

	// The agent stops: B answers 503 (not connected), not a hang.
	e.stopAgent()
	testwait.For(t, 10*time.Second, "B answering 503 after the agent stopped", func() (bool, string) {
		_, err := viaB.DialWorkspaceAgent(ctx, e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: port})
		return codersdk.IsAgentUnavailable(err), fmt.Sprintf("dial through B after the agent stopped: %v", err)
	})
}

// cuttableProxy forwards TCP connections to target until cut, which drops
// every connection and refuses new ones until restore.
type cuttableProxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newCuttableProxy(t *testing.T, target string) *cuttableProxy {
	p := &cuttableProxy{t: t, target: target}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.cut)
	return p
}

func (p *cuttableProxy) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

func (p *cuttableProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *cuttableProxy) restore() { p.listen(p.addr) }

// TestDialWaitsForReconnectingAgent: an agent whose connection drops (not
// a shutdown) is waited for: a user's connection made meanwhile succeeds
// once the agent is back, told by the database's notification, with no
// retry by the client.
func TestDialWaitsForReconnectingAgent(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	e.stopAgent() // the env's own agent; this test runs one behind a proxy
	proxy := newCuttableProxy(t, e.d.URL.Host)
	e.startAgent(t, func(o *agent.Options) {
		u, _ := url.Parse("http://" + proxy.addr)
		c := codersdk.New(u)
		c.SessionToken = e.token
		o.Client = c
	})
	e.waitReady(t, e.alice)
	port := uint16(coderdtest.EchoServer(t))

	proxy.cut()
	testwait.For(t, 10*time.Second, "the agent seen gone after the cut", func() (bool, string) {
		a, err := e.alice.WorkspaceAgent(context.Background(), e.agentID)
		return err == nil && a.Status != codersdk.AgentStatusConnected, fmt.Sprintf("agent status %s (%v): want it seen gone", a.Status, err)
	})
	go func() {
		time.Sleep(time.Second) // the outage's length, the subject of the test
		proxy.restore()
	}()
	start := time.Now()
	conn, err := e.alice.DialWorkspaceAgent(context.Background(), e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: port})
	if err != nil {
		t.Fatalf("dial while the agent reconnects: %v (after %s)", err, time.Since(start))
	}
	defer conn.Close()
	t.Logf("the dial waited %s for the agent to reconnect", time.Since(start).Round(time.Millisecond))
	if _, err := conn.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "back" {
		t.Fatalf("echo after the reconnect: %q %v", got, err)
	}
}

// relayConns is how many connections coderd opened to agents via "spare"
// or "stream" (coderd_relay_agent_connections_total).
func (e *relayEnv) relayConns(t testing.TB, via string) float64 {
	t.Helper()
	mfs, err := e.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "coderd_relay_agent_connections_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "via" && l.GetValue() == via {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// dialPort connects c to port in the workspace through the relay; the
// connection is closed when the test ends.
func (e *relayEnv) dialPort(t testing.TB, c *codersdk.Client, port uint16) net.Conn {
	t.Helper()
	conn, err := c.DialWorkspaceAgent(context.Background(), e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// echoes sends msg on conn while it reads the echo, and checks it.
func echoes(conn net.Conn, msg []byte) error {
	errc := make(chan error, 1)
	go func() { _, err := conn.Write(msg); errc <- err }()
	got := make([]byte, len(msg))
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("read the echo: %w", err)
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if !bytes.Equal(got, msg) {
		return errors.New("the echo differs from what was sent")
	}
	return nil
}

// TestRelaySpares: the agent keeps spare connections to coderd
// (coderd/relayspares.go). A user's connection rides one and carries
// megabytes both ways intact, over HTTP and HTTPS; the agent dials another
// once its connection is made; a burst of connections larger than the
// spares gets streams of the session for the rest, all of them working;
// and SSH rides a spare too. (A replica the agent's session is not on
// refuses its spares: TestRelayAcrossReplicas.)
func TestRelaySpares(t *testing.T) {
	t.Parallel()
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[overTLS], func(t *testing.T) {
			t.Parallel()
			e := newRelayEnvTLS(t, overTLS)
			e.waitReady(t, e.alice)
			port := uint16(coderdtest.EchoServer(t))
			dial := func() (net.Conn, error) {
				return e.alice.DialWorkspaceAgent(context.Background(), e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: port})
			}
			// onSpare returns a connection that rode a spare, dialing
			// until one does: the agent dials its spares when its session
			// is up and each again once its connection is made.
			onSpare := func() net.Conn {
				t.Helper()
				var conn net.Conn
				testwait.For(t, 10*time.Second, "a connection over a spare", func() (bool, string) {
					before := e.relayConns(t, "spare")
					c, err := dial()
					if err != nil {
						return false, err.Error()
					}
					if e.relayConns(t, "spare") == before {
						c.Close()
						return false, "no connection rode a spare connection"
					}
					conn = c
					return true, ""
				})
				return conn
			}

			conn := onSpare()
			msg := make([]byte, 4<<20)
			for i := range msg {
				msg[i] = byte(i*7 + i>>12)
			}
			if err := echoes(conn, msg); err != nil {
				t.Fatalf("4 MiB through a spare connection: %v", err)
			}
			conn.Close()
			onSpare().Close() // the agent dialed another

			// A burst: more connections at once than spares wait. Those
			// that find none get streams of the session.
			const burst = 2*codersdk.AgentSpareConns + 1
			before := e.relayConns(t, "spare") + e.relayConns(t, "stream")
			var wg sync.WaitGroup
			errs := make(chan error, burst)
			for i := range burst {
				wg.Go(func() {
					c, err := dial()
					if err != nil {
						errs <- err
						return
					}
					defer c.Close()
					if err := echoes(c, bytes.Repeat([]byte{byte('a' + i)}, 256<<10)); err != nil {
						errs <- fmt.Errorf("connection %d of the burst: %w", i, err)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if got := e.relayConns(t, "spare") + e.relayConns(t, "stream") - before; got != burst {
				t.Errorf("coderd counted %v connections to the agent for a burst of %d", got, burst)
			}
			onSpare().Close() // and spares again after it

			// SSH rides a spare too.
			if out, _, code := run(t, sshClient(t, e.alice, e.agentID), "", "echo via spare"); out != "via spare\n" || code != 0 {
				t.Errorf("ssh: %q, exit %d", out, code)
			}
		})
	}
}

// TestAgentSparesNeedRawUpgrade: an agent behind a proxy that passes only
// WebSocket upgrades serves every connection as a stream of its session
// and tries each spare connection once per session, not again and again.
func TestAgentSparesNeedRawUpgrade(t *testing.T) {
	t.Parallel()
	var seen func() []string
	e := newRelayEnv(t, func(o *agent.Options) {
		var u *url.URL
		u, seen = upgradeProxy(t, o.Client.URL, true)
		c := codersdk.New(u)
		c.SessionToken = o.Client.SessionToken
		o.Client = c
	})
	e.waitReady(t, e.alice)
	conn := e.dialPort(t, e.alice, uint16(coderdtest.EchoServer(t)))
	if err := echoes(conn, []byte("through a stream")); err != nil {
		t.Fatal(err)
	}
	if spare, stream := e.relayConns(t, "spare"), e.relayConns(t, "stream"); spare != 0 || stream != 1 {
		t.Errorf("%v connections rode spares, which the proxy cannot pass, and %v streams, want 1", spare, stream)
	}
	time.Sleep(3 * time.Second) // proves a negative: no raw relay attempt over several reconnects (backoff 100 ms to 1 s here, wall clock)
	raw := 0
	for _, up := range seen() {
		if up == relayconn.Protocol {
			raw++
		}
	}
	// The session's own try, then one per spare.
	if want := 1 + codersdk.AgentSpareConns; raw != want {
		t.Errorf("the proxy saw %d raw upgrades (%q), want %d: spares are tried once per session", raw, seen(), want)
	}
}

// TestAgentShutdownEndsForwards: when the agent stops, the TCP forwards it
// serves end with it, those riding a spare connection (a socket of its
// own, which outlives the session) included, and Run waits for them.
func TestAgentShutdownEndsForwards(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	e.waitReady(t, e.alice)
	port := uint16(coderdtest.EchoServer(t))
	var conns []net.Conn
	spare := false
	testwait.For(t, 10*time.Second, "a connection over a spare", func() (bool, string) {
		before := e.relayConns(t, "spare")
		c, err := e.alice.DialWorkspaceAgent(context.Background(), e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: port})
		if err != nil {
			return false, err.Error()
		}
		conns = append(conns, c)
		spare = e.relayConns(t, "spare") > before
		return spare, "no connection rode a spare connection yet"
	})
	for _, c := range conns {
		t.Cleanup(func() { c.Close() })
		if err := echoes(c, []byte("before the shutdown")); err != nil {
			t.Fatal(err)
		}
	}
	stopped := make(chan struct{})
	go func() { e.stopAgent(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop within 30 s")
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("forward %d of %d is still open after the agent stopped (read: %v)", i+1, len(conns), err)
		}
	}
}

// TestAgentFallsBackAndReturns: an agent whose agent URL (a proxy in front
// of coderd, as a region's workspace proxy) stops answering connects
// through its fallback URL (coderd itself) within seconds, and returns to
// the agent URL once its /healthz answers again.
func TestAgentFallsBackAndReturns(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	e.stopAgent() // the env's own agent; this test runs one behind a proxy
	proxy := newCuttableProxy(t, e.d.URL.Host)
	proxyURL := "http://" + proxy.addr
	var logs syncbuf.Buffer
	e.startAgent(t, func(o *agent.Options) {
		u, _ := url.Parse(proxyURL)
		c := codersdk.New(u)
		c.SessionToken = e.token
		o.Client = c
		o.FallbackURL = e.d.URL
		o.FallbackProbeInterval = 200 * time.Millisecond
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	connectedVia := func(u string) int { return strings.Count(logs.String(), `msg="connected to coderd" url=`+u+"\n") }
	e.waitReady(t, e.alice)
	if n := connectedVia(proxyURL); n != 1 {
		t.Fatalf("connected %d times through the agent URL %s, want 1\n%s", n, proxyURL, logs.String())
	}
	port := uint16(coderdtest.EchoServer(t))
	echo := func(when string) {
		t.Helper()
		conn, err := e.alice.DialWorkspaceAgent(context.Background(), e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: port})
		if err != nil {
			t.Fatalf("dial the agent %s: %v\n%s", when, err, logs.String())
		}
		defer conn.Close()
		if err := echoes(conn, []byte(when)); err != nil {
			t.Fatalf("echo %s: %v", when, err)
		}
	}

	proxy.cut()
	cut := time.Now()
	testwait.For(t, 10*time.Second, "connected through the fallback URL", func() (bool, string) {
		return connectedVia(e.d.URL.String()) == 1, "not connected through the fallback URL " + e.d.URL.String()
	})
	t.Logf("connected through the fallback URL %s after the agent URL stopped answering", time.Since(cut).Round(time.Millisecond))
	echo("through the fallback URL")
	if !strings.Contains(logs.String(), "the agent URL does not answer; using the fallback URL") {
		t.Errorf("the switch to the fallback URL is not logged:\n%s", logs.String())
	}

	proxy.restore()
	restored := time.Now()
	testwait.For(t, 10*time.Second, "connected through the agent URL again", func() (bool, string) {
		return connectedVia(proxyURL) == 2, "not connected through the agent URL again"
	})
	t.Logf("connected through the agent URL again %s after it came back", time.Since(restored).Round(time.Millisecond))
	if !strings.Contains(logs.String(), "the agent URL answers /healthz again; leaving the fallback URL for it") {
		t.Errorf("the switch back is not logged:\n%s", logs.String())
	}
	echo("through the agent URL again")
	if n := connectedVia(e.d.URL.String()); n != 1 {
		t.Errorf("connected %d times through the fallback URL, want 1\n%s", n, logs.String())
	}
}
