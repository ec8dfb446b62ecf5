package provisionerd

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/internal/testfs"
	"airgapcoder/internal/testtier"
)

// provide replaces the placeholders as the coder/coder provider does: the
// access URL with a trailing slash, and the agent's auth.
func provide(script, accessURL, auth string) string {
	script = strings.ReplaceAll(script, "${ACCESS_URL}", strings.TrimSuffix(accessURL, "/")+"/")
	return strings.ReplaceAll(script, "${AUTH_TYPE}", auth)
}

// fakeAgent records how it was started in the file $MARKER (and copies
// $SSL_CERT_FILE to $MARKER.ca).
const fakeAgent = `#!/bin/sh
{
	echo "args=$*"
	echo "url=$CODER_AGENT_URL"
	echo "auth=$CODER_AGENT_AUTH"
	echo "token=$CODER_AGENT_TOKEN"
	echo "cert=${SSL_CERT_FILE:-}"
	echo "binary_dir=${CODER_AGENT_BINARY_DIR:-}"
	echo "fallback=${CODER_AGENT_FALLBACK_URL:-}"
	echo "exe=$0"
} >"$MARKER"
if [ -n "${SSL_CERT_FILE:-}" ]; then cat "$SSL_CERT_FILE" >"$MARKER.ca"; fi
`

// fakeControlPlane serves /bin/coder-linux-amd64 over TLS with a
// certificate of its own. The first failFirst requests get 503, as from a
// coderd that is still starting.
type fakeControlPlane struct {
	URL      string
	CAPEM    string
	requests atomic.Int32
}

func newFakeControlPlane(t *testing.T, failFirst int32) *fakeControlPlane {
	t.Helper()
	cp := &fakeControlPlane{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cp.requests.Add(1) <= failFirst {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/bin/coder-linux-amd64" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(fakeAgent))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cp.URL = srv.URL
	cp.CAPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	return cp
}

// deadURL is an https URL on loopback where nothing listens.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "https://" + addr
}

// toolsPath returns a PATH folder with links to the tools the init script
// and the fake agent use, less the ones in omit.
func toolsPath(t *testing.T, omit ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range []string{"mktemp", "cat", "date", "sleep", "chmod", "mv", "curl", "wget"} {
		if strings.Contains(" "+strings.Join(omit, " ")+" ", " "+tool+" ") {
			continue
		}
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s not installed (scripts/install-deps.sh installs it)", tool)
		}
		if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runScript runs script with sh as a workspace would: a bare environment
// with the agent token, and PATH as given. It returns what the fake agent
// recorded (empty when it did not run), the CA file it saw, and stderr.
func runScript(t *testing.T, script, path string, extraEnv ...string) (marker map[string]string, markerCA, stderr string, err error) {
	t.Helper()
	dir := t.TempDir()
	scriptPath := filepath.Join(dir, "init.sh")
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	markerPath := filepath.Join(dir, "marker")
	cmd := exec.CommandContext(ctx, sh, scriptPath)
	cmd.Env = append([]string{"PATH=" + path, "HOME=" + dir, "TMPDIR=" + tmp, "MARKER=" + markerPath, "CODER_AGENT_TOKEN=secret-token"}, extraEnv...)
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	err = cmd.Run()
	marker = map[string]string{}
	if b, rerr := os.ReadFile(markerPath); rerr == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			k, v, _ := strings.Cut(line, "=")
			marker[k] = v
		}
	}
	if b, rerr := os.ReadFile(markerPath + ".ca"); rerr == nil {
		markerCA = string(b)
	}
	return marker, markerCA, errBuf.String(), err
}

// TestAgentScriptRuns runs the linux script, as the provider hands it to a
// template, against a control plane on loopback whose CA the system does
// not trust.
func TestAgentScriptRuns(t *testing.T) {
	testtier.Heavy(t, "waits out the agent script's download retries")
	t.Parallel()
	tests := []struct {
		name      string
		omit      []string // tools missing in the workspace
		failFirst int32
		noCA      bool
		timeout   string // CODER_AGENT_DOWNLOAD_TIMEOUT
		// accessDown: the access URL does not answer; the script has the
		// control plane as its fallback URL.
		accessDown bool
		wantErr    string // in stderr; "" for success
	}{
		{name: "curl"},
		{name: "wget", omit: []string{"curl"}},
		{name: "access URL down: curl from the fallback", accessDown: true},
		{name: "access URL down: wget from the fallback", omit: []string{"curl"}, accessDown: true},
		{name: "retries while coderd starts", failFirst: 1},
		{name: "no CA embedded: untrusted certificate", noCA: true, timeout: "1", wantErr: "could not download the agent"},
		{name: "gives up", failFirst: 1000, timeout: "1", wantErr: "could not download the agent"},
		{name: "neither curl nor wget", omit: []string{"curl", "wget"}, wantErr: "neither curl nor wget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cp := newFakeControlPlane(t, tt.failFirst)
			ca := cp.CAPEM
			if tt.noCA {
				ca = ""
			}
			accessURL, fallback := cp.URL, ""
			if tt.accessDown {
				accessURL, fallback = deadURL(t), cp.URL
			}
			script := provide(agentScript(agentPlatform{"linux", "amd64"}, ca, fallback), accessURL, "token")
			var env []string
			if tt.timeout != "" {
				env = append(env, "CODER_AGENT_DOWNLOAD_TIMEOUT="+tt.timeout)
			}
			marker, markerCA, stderr, err := runScript(t, script, toolsPath(t, tt.omit...), env...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(stderr, tt.wantErr) {
					t.Fatalf("got err %v and stderr %q, want a failure saying %q", err, stderr, tt.wantErr)
				}
				if len(marker) != 0 {
					t.Fatalf("the agent ran: %v", marker)
				}
				return
			}
			if err != nil {
				t.Fatalf("init script: %v\n%s", err, stderr)
			}
			want := map[string]string{"args": "agent", "url": accessURL, "fallback": fallback, "auth": "token", "token": "secret-token"}
			for k, v := range want {
				if marker[k] != v {
					t.Errorf("the agent saw %s=%q, want %q", k, marker[k], v)
				}
			}
			if d := marker["binary_dir"]; d == "" || filepath.Dir(marker["exe"]) != d {
				t.Errorf("CODER_AGENT_BINARY_DIR=%q, want the folder the agent runs from (%s)", d, marker["exe"])
			}
			if !strings.HasSuffix(marker["cert"], "/ca.pem") || !strings.HasPrefix(markerCA, cp.CAPEM) {
				t.Errorf("SSL_CERT_FILE=%q starting %.80q, want a file starting with the embedded CA", marker["cert"], markerCA)
			}
			if tt.failFirst > 0 && !strings.Contains(stderr, "retrying in 1s") {
				t.Errorf("stderr %q does not mention the retry", stderr)
			}
			if want := "failed; trying " + cp.URL + "/bin/coder-linux-amd64"; tt.accessDown && !strings.Contains(stderr, want) {
				t.Errorf("stderr %q, want it to say %q", stderr, want)
			}
		})
	}
}

func TestAgentScriptText(t *testing.T) {
	ca := "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
	tests := []struct {
		name     string
		p        agentPlatform
		ca       string
		fallback string
		want     []string
		notWant  []string
	}{
		{
			name: "darwin with CA", p: agentPlatform{"darwin", "arm64"}, ca: ca,
			want: []string{
				"#!/bin/sh\n", "access_url='${ACCESS_URL}'\n", `BINARY_URL="${access_url}bin/coder-darwin-arm64"`,
				"<<'" + caDelimiter + "'\n" + ca + caDelimiter + "\n",
				`--cacert "$CA_FILE"`, `--ca-certificate="$CA_FILE"`,
				`export CODER_AGENT_URL="${access_url%/}"`, `export CODER_AGENT_AUTH='${AUTH_TYPE}'`,
				`export SSL_CERT_FILE="$CA_FILE"`, `exec "$BINARY_PATH" agent`,
			},
			notWant: []string{"CODER_AGENT_TOKEN="},
		},
		{
			name: "linux without CA", p: agentPlatform{"linux", "amd64"},
			want:    []string{`BINARY_URL="${access_url}bin/coder-linux-amd64"`},
			notWant: []string{"CA_FILE", "SSL_CERT_FILE", "--cacert", "CODER_AGENT_TOKEN=", "fallback", "FALLBACK"},
		},
		{
			name: "linux with a fallback URL", p: agentPlatform{"linux", "amd64"}, fallback: "https://primary.example.test/it's",
			want: []string{
				`fallback_url='https://primary.example.test/it'\''s/'` + "\n",
				`FALLBACK_BINARY_URL="${fallback_url}bin/coder-linux-amd64"`,
				`fetch "$FALLBACK_BINARY_URL"`,
				`export CODER_AGENT_FALLBACK_URL="${fallback_url%/}"`,
			},
		},
		{
			name: "windows with a fallback URL", p: agentPlatform{"windows", "amd64"}, fallback: "https://primary.example.test/",
			want: []string{
				"$FallbackURL = 'https://primary.example.test/'", "$FallbackBinaryURL = $FallbackURL + 'bin/coder-windows-amd64.exe'",
				"Get-AgentFrom $FallbackBinaryURL",
				"if ($FallbackURL) { $env:CODER_AGENT_FALLBACK_URL = $FallbackURL.TrimEnd('/') }",
			},
		},
		{
			name: "linux armv7 downloads the arm build", p: agentPlatform{"linux", "armv7"},
			want: []string{`BINARY_URL="${access_url}bin/coder-linux-arm"` + "\n"},
		},
		{
			name: "windows", p: agentPlatform{"windows", "arm64"}, ca: ca,
			want: []string{
				"$CoderURL = '${ACCESS_URL}'", "$BinaryURL = $CoderURL + 'bin/coder-windows-arm64.exe'",
				"-Value @'\n" + ca + "'@\n", "--cacert", "$env:CODER_AGENT_URL = $CoderURL.TrimEnd('/')",
				"$env:CODER_AGENT_AUTH = '${AUTH_TYPE}'", "$FallbackURL = ''",
			},
			notWant: []string{"#!/bin/sh", "CODER_AGENT_TOKEN ="},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := agentScript(tt.p, tt.ca, tt.fallback)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("script lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("script has %q:\n%s", w, got)
				}
			}
			if tt.p.OS == "windows" {
				return
			}
			cmd := exec.Command("sh", "-n")
			cmd.Stdin = strings.NewReader(provide(got, "https://coder.example.test", "token"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("sh -n: %v\n%s", err, out)
			}
		})
	}
}

// TestAgentScriptEnv: one script per platform coder_agent accepts and
// coderd serves, named as the provider looks them up.
func TestAgentScriptEnv(t *testing.T) {
	env := agentScriptEnv("", "")
	var got []string
	for k := range env {
		got = append(got, k)
	}
	sort.Strings(got)
	want := []string{
		"CODER_AGENT_SCRIPT_darwin_amd64", "CODER_AGENT_SCRIPT_darwin_arm64",
		"CODER_AGENT_SCRIPT_linux_amd64", "CODER_AGENT_SCRIPT_linux_arm64", "CODER_AGENT_SCRIPT_linux_armv7",
		"CODER_AGENT_SCRIPT_windows_amd64", "CODER_AGENT_SCRIPT_windows_arm64",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestLoadAgentCA(t *testing.T) {
	cp := newFakeControlPlane(t, 0)
	dir := t.TempDir()
	t.Run("comments dropped", func(t *testing.T) {
		got, err := loadAgentCA(testfs.WriteFile(t, dir, "ok.pem", "# our CA\n"+cp.CAPEM))
		if err != nil || got != cp.CAPEM {
			t.Errorf("got %q, %v; want the certificate alone", got, err)
		}
	})
	t.Run("no certificate", func(t *testing.T) {
		if _, err := loadAgentCA(testfs.WriteFile(t, dir, "empty.pem", "nothing\n")); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
			t.Errorf("got %v, want an error saying the file holds no certificate", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		big := strings.Repeat(cp.CAPEM, maxAgentCA/len(cp.CAPEM)+1)
		_, err := loadAgentCA(testfs.WriteFile(t, dir, "big.pem", big))
		if !errors.Is(err, errAgentCATooLarge) || !strings.Contains(err.Error(), "big.pem") {
			t.Errorf("got %v, want errAgentCATooLarge naming the file", err)
		}
	})
}
