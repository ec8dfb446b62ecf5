package coderd

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"

	"github.com/gin-gonic/gin"
)

// Agent binaries: workspaces download the agent (the coder binary itself)
// from GET /bin/coder-<os>-<arch>, which is what our provider's init script
// fetches. The running binary serves its own platform; other platforms come
// from Options.AgentBinariesDir (a bundle's binaries), files named the same.

var agentBinaryRe = regexp.MustCompile(`^coder-(linux|darwin|windows)-(amd64|arm64|arm|386)(\.exe)?$`)

func (api *API) agentBinary(c *gin.Context) error {
	name := c.Param("name")
	m := agentBinaryRe.FindStringSubmatch(name)
	if m == nil {
		return notFound(fmt.Sprintf("Agent binary %q (names look like coder-linux-amd64)", name))
	}
	var path string
	if api.opts.AgentBinariesDir != "" {
		candidate := filepath.Join(api.opts.AgentBinariesDir, name)
		if st, err := os.Stat(candidate); err == nil && st.Mode().IsRegular() {
			path = candidate
		}
	}
	if path == "" && m[1] == runtime.GOOS && m[2] == runtime.GOARCH {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("locate own binary: %w", err)
		}
		path = self
	}
	if path == "" {
		return notFound(fmt.Sprintf("Agent binary for %s/%s: this deployment has none (it serves %s/%s and what its bundle carries)", m[1], m[2], runtime.GOOS, runtime.GOARCH))
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	c.Header("Content-Type", "application/octet-stream")
	http.ServeContent(c.Writer, c.Request, name, st.ModTime(), f)
	return nil
}
