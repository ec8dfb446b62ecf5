// Package relaymux holds the yamux settings every end of a relay session
// uses: coderd's side of an agent's connection and of a proxy's relay
// session, a workspace proxy's, and the agent's. One place, so that the
// window, the keepalive and the timeouts cannot drift apart between the
// ends that must agree on them.
//
// It owns no connections and starts nothing; the transport under a session
// is package relayconn's.
package relaymux

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hashicorp/yamux"

	"airgapcoder/relayconn"
)

// Config is the yamux configuration of a relay session end: keepalive
// pings every keepAlive (a dead connection is noticed within about two),
// the relay's stream window (relayconn.StreamWindow), and yamux's own log
// lines sent to log at debug level.
func Config(log *slog.Logger, keepAlive time.Duration) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = nil
	cfg.Logger = logger{log}
	cfg.KeepAliveInterval = keepAlive
	cfg.ConnectionWriteTimeout = keepAlive
	cfg.MaxStreamWindowSize = relayconn.StreamWindow
	cfg.StreamOpenTimeout = 30 * time.Second
	cfg.StreamCloseTimeout = 30 * time.Second
	return cfg
}

// logger sends yamux's log lines to slog at debug level.
type logger struct{ log *slog.Logger }

func (l logger) Print(v ...any) { l.log.Debug(strings.TrimSpace(fmt.Sprint(v...))) }
func (l logger) Printf(format string, v ...any) {
	l.log.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
func (l logger) Println(v ...any) { l.log.Debug(strings.TrimSpace(fmt.Sprintln(v...))) }
