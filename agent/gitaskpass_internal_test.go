package agent

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/codersdk"
)

// TestGitAskpassEnvironment: an SSH command and a script both get
// GIT_ASKPASS (the agent's binary, over the agent's and the template's
// own), the agent URL, and a token file only the user can read; never the
// token itself.
func TestGitAskpassEnvironment(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := newSSHAgent(t, []string{"PATH=/usr/bin:/bin", "GIT_ASKPASS=/usr/lib/ssh/ssh-askpass", "CODER_AGENT_TOKEN=agent-token"}, codersdk.AgentManifest{
		EnvironmentVariables: map[string]string{"GIT_ASKPASS": "/opt/template-askpass"},
	})
	out, errOut, _ := s.exec(t, `echo "$GIT_ASKPASS|$CODER_AGENT_URL|${CODER_AGENT_TOKEN:-none}|$CODER_AGENT_TOKEN_FILE"`)
	got := strings.Split(strings.TrimSpace(out), "|")
	if len(got) != 4 {
		t.Fatalf("output %q (stderr %q)", out, errOut)
	}
	if got[0] != exe {
		t.Errorf("GIT_ASKPASS: got %q, want the agent's binary %q", got[0], exe)
	}
	if got[1] != "http://127.0.0.1:1" {
		t.Errorf("CODER_AGENT_URL: got %q, want the agent's URL http://127.0.0.1:1", got[1])
	}
	if got[2] != "none" {
		t.Errorf("CODER_AGENT_TOKEN: got %q, want it unset", got[2])
	}
	tokenFile := got[3]
	if dir, name := filepath.Split(tokenFile); filepath.Clean(dir) != s.agent.opts.ScriptDataDir || !strings.HasPrefix(name, tokenFilePrefix) {
		t.Errorf("CODER_AGENT_TOKEN_FILE: got %q, want %s%s… in %s", tokenFile, tokenFilePrefix, "<hash>", s.agent.opts.ScriptDataDir)
	}
	b, err := os.ReadFile(tokenFile)
	if err != nil || string(b) != "agent-token" {
		t.Errorf("token file: got %q, %v; want the agent token", b, err)
	}
	if st, err := os.Stat(tokenFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode: got %v, %v; want 0600", st.Mode(), err)
	}

	// Scripts get the same.
	env := s.agent.execEnv(s.agent.currentManifest()).env
	for _, want := range []string{"GIT_ASKPASS=" + exe, "CODER_AGENT_TOKEN_FILE=" + tokenFile} {
		if last := lastValue(env, strings.SplitN(want, "=", 2)[0]); last != want {
			t.Errorf("script environment: got %q, want %q", last, want)
		}
	}
}

// TestGitAskpassKeepsAgentURL: an agent URL in the agent's environment is
// the one sessions see (the init script's, as it exported it).
func TestGitAskpassKeepsAgentURL(t *testing.T) {
	s := newSSHAgent(t, []string{"PATH=/usr/bin:/bin", "CODER_AGENT_URL=https://coder.example.test/"}, codersdk.AgentManifest{})
	out, _, _ := s.exec(t, `echo "$CODER_AGENT_URL"`)
	if got := strings.TrimSpace(out); got != "https://coder.example.test/" {
		t.Errorf("CODER_AGENT_URL: got %q, want the agent's own https://coder.example.test/", got)
	}
}

// lastValue is the entry for name that wins in env (the last one).
func lastValue(env []string, name string) string {
	for j := len(env) - 1; j >= 0; j-- {
		if strings.HasPrefix(env[j], name+"=") {
			return env[j]
		}
	}
	return ""
}

// TestGitAskpassTokenFilePlace: the token file goes in the init script's
// download folder when the agent runs from it (it is removed when the
// agent exits), else in ScriptDataDir; two agents sharing a folder get a
// file each.
func TestGitAskpassTokenFilePlace(t *testing.T) {
	newAgent := func(token string, environ []string) *Agent {
		u, _ := url.Parse("http://127.0.0.1:1")
		c := codersdk.New(u)
		c.SessionToken = token
		a, err := New(Options{Client: c, Environ: environ, Logger: discardLogger(), ScriptDataDir: filepath.Join(t.TempDir(), "data")})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	binDir := filepath.Join(t.TempDir(), "coder.abc123")
	if err := os.Mkdir(binDir, 0o700); err != nil {
		t.Fatal(err)
	}
	a := newAgent("token-a", []string{BinaryDirEnv + "=" + binDir})
	a.exeDir = binDir // as if the binary ran from there
	path, err := a.writeTokenFile()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != binDir {
		t.Errorf("token file %s, want it in the download folder %s", path, binDir)
	}

	// Not the binary's folder: ScriptDataDir.
	b := newAgent("token-b", []string{BinaryDirEnv + "=" + binDir})
	pathB, err := b.writeTokenFile()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(pathB) != b.opts.ScriptDataDir {
		t.Errorf("token file %s, want it in ScriptDataDir %s", pathB, b.opts.ScriptDataDir)
	}

	// Two agents, one folder: two files, each with its token.
	c := newAgent("token-c", []string{BinaryDirEnv + "=" + binDir})
	c.exeDir = binDir
	pathC, err := c.writeTokenFile()
	if err != nil {
		t.Fatal(err)
	}
	if pathC == path {
		t.Fatalf("two agents share the token file %s", path)
	}
	for p, want := range map[string]string{path: "token-a", pathC: "token-c"} {
		if got, err := os.ReadFile(p); err != nil || string(got) != want {
			t.Errorf("%s: got %q, %v; want %q", p, got, err, want)
		}
	}
}
