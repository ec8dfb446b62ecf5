package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// BinaryDirEnv names the folder the template's init script downloaded the
// agent into (a fresh `mktemp -d .../coder.XXXXXX` at every start). A
// workspace that runs on its host, not in a container, would keep one such
// copy of the agent per start, so the agent removes the folder when it
// exits (RemoveBinaryDir). The variable is not passed on to what the agent
// starts.
const BinaryDirEnv = "CODER_AGENT_BINARY_DIR"

// RemoveBinaryDir removes dir, the value of BinaryDirEnv, once the agent
// is done. It removes only the folder the running binary is in, and only
// one named as the init script names it (coder.*), so that a value
// inherited by mistake removes nothing else.
func RemoveBinaryDir(dir string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("remove the agent's download folder: %w", err)
	}
	want, err := filepath.EvalSymlinks(filepath.Dir(exe))
	if err != nil {
		return fmt.Errorf("remove the agent's download folder: %w", err)
	}
	got, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("remove the agent's download folder %s: %w", dir, err)
	}
	if got != want || !strings.HasPrefix(filepath.Base(got), "coder.") {
		return fmt.Errorf("%s=%s is not the init script's download folder of this agent (%s): left as it is", BinaryDirEnv, dir, want)
	}
	return os.RemoveAll(got)
}
