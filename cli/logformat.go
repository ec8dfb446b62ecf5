package cli

import (
	"log/slog"

	"github.com/spf13/cobra"

	"airgapcoder/internal/logformat"
)

// logFormatOption is --log-format's environment variable, for the option
// tables of the commands that log: coder server, coder appliance up and
// coder provisionerd start.
var logFormatOption = option{flag: "log-format", env: "CODER_LOG_FORMAT"}

// logFormatFlag declares --log-format on cmd; a value other than text, json
// or auto is a usage error naming the flag (or CODER_LOG_FORMAT).
func logFormatFlag(cmd *cobra.Command) {
	f := logformat.Auto
	cmd.Flags().Var(&f, "log-format", "Log as human-readable lines (text) or JSON lines (json); auto is text on a terminal, json otherwise (CODER_LOG_FORMAT)")
}

// loggerFor is the logger of a command with --log-format (after its options
// are resolved): records at Info (Debug with --verbose) on stderr, in the
// format chosen.
func (inv *invocation) loggerFor(cmd *cobra.Command) *slog.Logger {
	f := logformat.Auto
	if fl := cmd.Flags().Lookup("log-format"); fl != nil {
		if v, ok := fl.Value.(*logformat.Format); ok {
			f = *v
		}
	}
	level := slog.LevelInfo
	if inv.verbose {
		level = slog.LevelDebug
	}
	return slog.New(logformat.NewHandler(inv.stderr, f, writerIsTerminal(inv.stderr), &slog.HandlerOptions{Level: level}))
}
