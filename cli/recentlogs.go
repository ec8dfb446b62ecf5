package cli

import (
	"log/slog"

	"github.com/spf13/cobra"

	"airgapcoder/internal/logring"
)

// loggerWithRecentLogs is loggerFor(cmd) for the commands that run coderd
// (coder server, coder appliance up): every record still goes to stderr as
// before, and the newest Info and above are also kept, redacted, in the
// returned ring, which coderd serves to owners (GET /api/v2/debug/logs)
// for `coder support bundle`.
func (inv *invocation) loggerWithRecentLogs(cmd *cobra.Command) (*slog.Logger, *logring.Ring) {
	ring := logring.New(logring.DefaultSize)
	return slog.New(logring.NewHandler(inv.loggerFor(cmd).Handler(), ring, slog.LevelInfo)), ring
}
