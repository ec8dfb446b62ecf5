//go:build !unix

package controlplane

import "log/slog"

// raiseFileLimit does nothing where there is no RLIMIT_NOFILE.
func raiseFileLimit(*slog.Logger) {}
