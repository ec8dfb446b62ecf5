package cli_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestLoginCLIAuthToken: on a deployment with password sign-in disabled,
// `coder login URL` without credentials prints the dashboard's /cli-auth
// page and takes the token pasted on stdin; the page makes that token for
// whoever is signed in there (here the owner, who keeps a password).
func TestLoginCLIAuthToken(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{DisablePasswordAuth: true})
	owner, _ := d.CreateFirstUser(t)

	// The dashboard's /cli-auth: a form, then (POST) the token.
	page := func(method string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(context.Background(), method, d.URL.String()+codersdk.CLIAuthPath, nil)
		req.AddCookie(&http.Cookie{Name: codersdk.SessionTokenCookie, Value: owner.SessionToken})
		req.Header.Set("Origin", d.URL.String())
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s /cli-auth: got %d %s", method, res.StatusCode, body)
		}
		return string(body)
	}
	if body := page(http.MethodGet); !strings.Contains(body, `id="create-token"`) || strings.Contains(body, "session-token") {
		t.Fatalf("GET /cli-auth made a token or shows no button: %s", body)
	}
	m := regexp.MustCompile(`<code id="session-token">([^<]+)</code>`).FindStringSubmatch(page(http.MethodPost))
	if m == nil {
		t.Fatal("POST /cli-auth shows no token")
	}

	cmd := exec.Command(coderBinary(t), "login", d.URL.String())
	cmd.Env = baseEnv(t)
	cmd.Stdin = strings.NewReader(m[1] + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("coder login: %v\nstdout: %s\nstderr: %s", err, &stdout, &stderr)
	}
	if !strings.Contains(stderr.String(), d.URL.String()+"/cli-auth") || !strings.Contains(stdout.String(), "as admin") {
		t.Errorf("coder login: got stdout %q, stderr %q; want the /cli-auth URL and admin signed in", &stdout, &stderr)
	}

	// Nothing pasted: a usage error that says what to do.
	cmd = exec.Command(coderBinary(t), "login", d.URL.String())
	cmd.Env = baseEnv(t)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "pass --token") {
		t.Errorf("coder login with nothing pasted: got %v, %s; want exit 2 naming --token", err, out)
	}
}
