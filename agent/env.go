package agent

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"airgapcoder/codersdk"
)

// What every process the agent starts (shells, commands, scripts, metadata
// scripts) gets: the working folder, the login shell and the environment.

// workDir is where shells and scripts start: the manifest's directory (~
// expanded) if it exists, else the home folder.
func (a *Agent) workDir(m codersdk.AgentManifest) string {
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/"
	}
	dir := m.Directory
	switch {
	case dir == "":
		return home
	case dir == "~":
		dir = home
	case strings.HasPrefix(dir, "~/"):
		dir = filepath.Join(home, dir[2:])
	}
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return dir
	}
	return home
}

// environ is the environment of shells and scripts, later entries winning:
// the agent's own (without its token), HOME, USER and LOGNAME, what
// identifies the workspace (CODER, CODER_WORKSPACE_NAME,
// CODER_WORKSPACE_OWNER_NAME, CODER_WORKSPACE_AGENT_NAME), then the
// manifest's variables (coder_agent env merged with coder_env), whose values
// may refer to the agent's environment ("$PATH:/opt/bin") as in Coder,
// then what `coder gitaskpass` needs (GIT_ASKPASS over everything, as in
// Coder; see gitaskpass.go). Finally PATH gets the scripts' bin folder in
// front (CODER_SCRIPT_BIN_DIR, where Coder modules put their tools) and the
// agent binary's folder at the end, so that metadata scripts can call
// `coder stat`.
func (a *Agent) environ(m codersdk.AgentManifest) []string {
	env := make([]string, 0, len(a.opts.Environ)+len(m.EnvironmentVariables)+10)
	base := map[string]string{}
	for _, kv := range a.opts.Environ {
		k, v, _ := strings.Cut(kv, "=")
		if k == "CODER_AGENT_TOKEN" || k == BinaryDirEnv {
			continue
		}
		base[k] = v
		env = append(env, kv)
	}
	if home, err := os.UserHomeDir(); err == nil {
		env = append(env, "HOME="+home)
	}
	if u := currentUsername(); u != "" {
		env = append(env, "USER="+u, "LOGNAME="+u)
	}
	env = append(env, "CODER=true", "CODER_WORKSPACE_NAME="+m.WorkspaceName, "CODER_WORKSPACE_OWNER_NAME="+m.OwnerName,
		"CODER_WORKSPACE_AGENT_NAME="+m.AgentName)
	path := base["PATH"]
	for _, k := range slices.Sorted(maps.Keys(m.EnvironmentVariables)) {
		v := os.Expand(m.EnvironmentVariables[k], func(name string) string { return base[name] })
		if k == "PATH" {
			path = v
			continue
		}
		env = append(env, k+"="+v)
	}
	env = append(env, a.askpassEnv(base)...)
	dirs := []string{a.scriptBinDir()}
	if path != "" {
		dirs = append(dirs, path)
	}
	if a.exeDir != "" && !slices.Contains(filepath.SplitList(path), a.exeDir) {
		dirs = append(dirs, a.exeDir)
	}
	return append(env, "PATH="+strings.Join(dirs, string(filepath.ListSeparator)))
}

// scriptBinDir is CODER_SCRIPT_BIN_DIR: a folder on every PATH the agent
// sets, where scripts may install tools.
func (a *Agent) scriptBinDir() string { return filepath.Join(a.opts.ScriptDataDir, "bin") }

// execEnv is how the agent starts a script: with the login shell, in the
// workspace's folder, with its environment.
type execEnv struct {
	shell string
	dir   string
	env   []string
}

func (a *Agent) execEnv(m codersdk.AgentManifest) execEnv {
	return execEnv{shell: loginShell(), dir: a.workDir(m), env: a.environ(m)}
}

// command returns `shell -c script` in e's folder and environment, plus
// extra variables.
func (e execEnv) command(script string, extra ...string) *exec.Cmd {
	cmd := exec.Command(e.shell, "-c", script)
	cmd.Dir = e.dir
	cmd.Env = append(slices.Clip(e.env), extra...)
	return cmd
}

// userCommand builds the process of a user's session (an SSH session, a
// web terminal): the login shell itself when command is "" (a login shell,
// by the argv[0] convention every shell knows), else `shell -c command`; in
// the workspace's folder, with the workspace's environment, SHELL, and
// extra variables last.
func (a *Agent) userCommand(command string, extra ...string) *exec.Cmd {
	m := a.currentManifest()
	shell := loginShell()
	var cmd *exec.Cmd
	if command == "" {
		cmd = &exec.Cmd{Path: shell, Args: []string{"-" + filepath.Base(shell)}}
	} else {
		cmd = &exec.Cmd{Path: shell, Args: []string{shell, "-c", command}}
	}
	cmd.Dir = a.workDir(m)
	cmd.Env = append(append(a.environ(m), "SHELL="+shell), extra...)
	return cmd
}

// loginShell returns the current user's shell from /etc/passwd, else $SHELL,
// else /bin/sh.
func loginShell() string {
	for _, f := range passwdEntries() {
		if len(f) >= 7 && f[6] != "" {
			if _, err := os.Stat(f[6]); err == nil {
				return f[6]
			}
		}
	}
	if sh := os.Getenv("SHELL"); sh != "" {
		return sh
	}
	return "/bin/sh"
}

// currentUsername returns the current user's name from /etc/passwd, else
// $USER.
func currentUsername() string {
	if e := passwdEntries(); len(e) > 0 {
		return e[0][0]
	}
	return os.Getenv("USER")
}

// passwdEntries returns the /etc/passwd lines of the current uid, in file
// order, split into their colon-separated fields (none when the file
// cannot be read).
func passwdEntries() [][]string {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return nil
	}
	uid := strconv.Itoa(os.Getuid())
	var out [][]string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); len(f) >= 3 && f[2] == uid {
			out = append(out, f)
		}
	}
	return out
}
