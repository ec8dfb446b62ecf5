//go:build unix

package controlplane

import (
	"log/slog"
	"syscall"

	"airgapcoder/codersdk"
)

// fdsPerAgent is what one connected agent holds open in coderd: its relay
// connection and its spare connections.
const fdsPerAgent = 1 + codersdk.AgentSpareConns

// raiseFileLimit raises the soft limit on open files (RLIMIT_NOFILE) to the
// hard limit and logs both, with about how many agents the limit allows:
// every connected agent holds fdsPerAgent sockets open, and one more while
// an HTTP connection of its API calls is kept alive. The Go runtime
// already raises the soft limit when package os starts (Go 1.19 and
// later); this makes the limit visible in the log, raises it if something
// lowered it since, and warns when it leaves room for fewer than 1,000
// agents. `coder appliance status` shows the same figures for the running
// appliance (appliance.OpenFileLimit, read from /proc/PID/limits), with
// the same warning.
func raiseFileLimit(log *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("read the open file limit", "err", err)
		return
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			log.Warn("raise the open file limit to the hard limit", "soft", lim.Cur, "hard", lim.Max, "err", err)
		} else {
			lim = raised
		}
	}
	agents := lim.Cur / fdsPerAgent
	if agents < 1000 {
		log.Warn("open file limit is low: raise the hard limit (LimitNOFILE= in systemd, ulimit -Hn) for more agents",
			"soft", lim.Cur, "hard", lim.Max, "agents_at_most", agents)
		return
	}
	log.Info("open file limit", "soft", lim.Cur, "hard", lim.Max, "agents_at_most", agents)
}
