package appliance

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifySocketEnv names the socket systemd listens on for a Type=notify
// service (sd_notify(3)).
const notifySocketEnv = "NOTIFY_SOCKET"

// notifySystemd tells systemd the service's state ("READY=1",
// "STOPPING=1", "STATUS=..." lines) when it runs the appliance as a
// Type=notify unit; without NOTIFY_SOCKET it does nothing (daemon.SdNotify
// answers false, nil).
func notifySystemd(state string) error {
	if _, err := daemon.SdNotify(false, state); err != nil {
		return fmt.Errorf("notify systemd at %s: %w", os.Getenv(notifySocketEnv), err)
	}
	return nil
}

// notifyRelay passes one process's messages for systemd on: systemd
// (NotifyAccess=main) hears only its main process, and UpAsRoot's child is
// not that.
type notifyRelay struct {
	conn *net.UnixConn
	from atomic.Int64 // the pid whose messages pass; others are dropped
}

// relayNotifications listens on a datagram socket at path that only acct
// may send to. Messages from the pid set with From are passed on to
// systemd; those of any other process (PostgreSQL sends READY=1 of its
// own) are dropped, as systemd would drop them. Close stops it.
func relayNotifications(path string, acct serviceAccount, log *slog.Logger) (*notifyRelay, error) {
	_ = os.Remove(path)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("relay notifications to systemd: %w", err)
	}
	r := &notifyRelay{conn: conn}
	if err := setPassCred(conn); err != nil {
		conn.Close()
		return nil, err
	}
	if err := os.Chown(path, acct.UID, acct.GID); err != nil {
		conn.Close()
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		conn.Close()
		return nil, err
	}
	go func() {
		buf, oob := make([]byte, 4096), make([]byte, syscall.CmsgSpace(syscall.SizeofUcred))
		for {
			n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			if pid := senderPID(oob[:oobn]); pid == 0 || int64(pid) != r.from.Load() {
				continue
			}
			if err := notifySystemd(string(buf[:n])); err != nil {
				log.Warn("pass a notification on to systemd", "err", err)
			}
		}
	}()
	return r, nil
}

// Addr is the socket to name in the child's NOTIFY_SOCKET.
func (r *notifyRelay) Addr() string { return r.conn.LocalAddr().String() }

// From sets the process whose messages pass.
func (r *notifyRelay) From(pid int) { r.from.Store(int64(pid)) }

func (r *notifyRelay) Close() error { return r.conn.Close() }

func setPassCred(conn *net.UnixConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1)
	}); err != nil {
		return err
	}
	return serr
}

// senderPID is the pid in a message's credentials (0 when it has none).
func senderPID(oob []byte) int32 {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if cred, err := syscall.ParseUnixCredentials(&m); err == nil {
			return cred.Pid
		}
	}
	return 0
}

// withoutNotifySocket is env minus NOTIFY_SOCKET and WATCHDOG_PID: a child
// appliance must not tell systemd it is the service (an upgrade's trial
// start), or tells it through a notifyRelay (UpAsRoot's child), which
// passes its messages on as the main process's. WATCHDOG_PID names the main
// process, so left in a child's environment it would make
// daemon.SdWatchdogEnabled there answer that systemd does not watch it, and
// the watchdog would go unfed.
func withoutNotifySocket(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, notifySocketEnv+"=") || strings.HasPrefix(kv, "WATCHDOG_PID=")
	})
}

// watchdogInterval is how often to tell systemd the appliance is alive:
// half of WATCHDOG_USEC (the unit's WatchdogSec), 0 when systemd does not
// watch this process (no or a malformed WATCHDOG_USEC, or a WATCHDOG_PID
// that is another process's).
func watchdogInterval() time.Duration {
	timeout, err := daemon.SdWatchdogEnabled(false)
	if err != nil || timeout <= 0 {
		return 0
	}
	return timeout / 2
}

// runWatchdog sends WATCHDOG=1 every interval while healthy answers nil,
// until ctx ends. While it does not, systemd hears nothing but a STATUS=
// line saying why, and kills and restarts the appliance once WatchdogSec
// has passed: a wedged process, or one whose parts stopped working, is not
// left running.
func runWatchdog(ctx context.Context, interval time.Duration, healthy func(context.Context) error, log *slog.Logger) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	wasHealthy := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		hctx, cancel := context.WithTimeout(ctx, interval)
		err := healthy(hctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if wasHealthy {
				log.Warn("unhealthy: the systemd watchdog is not fed", "err", err)
			}
			wasHealthy = false
			_ = notifySystemd("STATUS=unhealthy: " + err.Error())
			continue
		}
		msg := "WATCHDOG=1"
		if !wasHealthy {
			log.Info("healthy again: feeding the systemd watchdog")
			msg += "\nSTATUS=serving"
		}
		wasHealthy = true
		if err := notifySystemd(msg); err != nil {
			log.Warn("feed the systemd watchdog", "err", err)
		}
	}
}
