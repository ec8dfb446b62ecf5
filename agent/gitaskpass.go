package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"airgapcoder/internal/atomicfile"
)

// Git credentials inside the workspace (issue 33), as Coder's agent gives
// them: every process the agent starts (SSH sessions and commands, web
// terminals, scripts, metadata) has GIT_ASKPASS set to the agent's own
// binary, over whatever the agent's environment or the template says, as
// in Coder. git runs it with one argument, its prompt ("Username for
// 'https://git.example': "); the binary sees that git runs it (`coder
// gitaskpass`) and asks coderd, as this agent, for the workspace owner's
// token for that URL (GET /api/v2/workspaceagents/me/external-auth).
//
// To ask as the agent it needs the agent's URL and token. Coder exports
// CODER_AGENT_TOKEN to every session; this agent keeps the token out of
// environments (`env`, process listings and error reports show those) and
// writes it instead to a file only the agent's user can read, named by
// CODER_AGENT_TOKEN_FILE, which the CLI reads as Coder's does. The file is
// in the init script's download folder of the agent (BinaryDirEnv), which
// goes when the agent exits, or else in ScriptDataDir; its name is derived
// from the token, so that agents sharing a folder do not share a file.
// CODER_AGENT_URL is the agent's own, set when the agent's environment
// does not already have it.

// Variables the agent sets for `coder gitaskpass` and `coder external-auth`.
const (
	// GitAskpassEnv is what git runs to ask for a user name or password.
	GitAskpassEnv = "GIT_ASKPASS"
	// AgentURLEnv is the deployment URL the agent talks to.
	AgentURLEnv = "CODER_AGENT_URL"
	// AgentTokenFileEnv names the file holding the agent token.
	AgentTokenFileEnv = "CODER_AGENT_TOKEN_FILE"
)

// tokenFilePrefix starts the name of the agent token's file (the
// scripts' folders in ScriptDataDir are named after log source ids, never
// like this).
const tokenFilePrefix = ".coder-agent-token-"

// askpassEnv is what `coder gitaskpass` needs from the environment of
// what the agent starts; base is the agent's own environment. A variable
// it cannot provide (no executable path, a token file that cannot be
// written) is left out: git then asks as it would without the agent.
func (a *Agent) askpassEnv(base map[string]string) []string {
	var env []string
	if exe, err := os.Executable(); err == nil {
		// Git on Windows wants forward slashes, as Coder notes.
		env = append(env, GitAskpassEnv+"="+strings.ReplaceAll(exe, `\`, "/"))
	}
	if base[AgentURLEnv] == "" && a.client != nil && a.client.URL != nil {
		env = append(env, AgentURLEnv+"="+a.client.URL.String())
	}
	if path, err := a.writeTokenFile(); err != nil {
		a.log.Warn("write the agent token file for git credentials; git will ask the user instead", "err", err)
	} else {
		env = append(env, AgentTokenFileEnv+"="+path)
	}
	return env
}

// tokenFilePath is where the agent token's file goes: see above.
func (a *Agent) tokenFilePath() string {
	sum := sha256.Sum256([]byte(a.client.SessionToken))
	name := tokenFilePrefix + hex.EncodeToString(sum[:8])
	for _, kv := range a.opts.Environ {
		dir, ok := strings.CutPrefix(kv, BinaryDirEnv+"=")
		if !ok || a.exeDir == "" || !strings.HasPrefix(filepath.Base(dir), "coder.") {
			continue
		}
		// The folder RemoveBinaryDir removes when the agent exits.
		got, err1 := filepath.EvalSymlinks(dir)
		want, err2 := filepath.EvalSymlinks(a.exeDir)
		if err1 == nil && err2 == nil && got == want {
			return filepath.Join(got, name)
		}
	}
	return filepath.Join(a.opts.ScriptDataDir, name)
}

// writeTokenFile writes the agent token, mode 0600, to tokenFilePath
// unless it already holds it, and returns its path.
func (a *Agent) writeTokenFile() (string, error) {
	if a.client == nil || a.client.SessionToken == "" {
		return "", errors.New("no agent token")
	}
	path := a.tokenFilePath()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	token := []byte(a.client.SessionToken)
	if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() && st.Mode().Perm() == 0o600 {
		if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, token) {
			return path, nil
		}
	}
	if err := atomicfile.Write(path, token, 0o600); err != nil {
		return "", err
	}
	return path, nil
}
