package appliance

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
)

// notifySocketEnv names the socket systemd listens on for a Type=notify
// service (sd_notify(3)).
const notifySocketEnv = "NOTIFY_SOCKET"

// notifySystemd tells systemd the service's state ("READY=1",
// "STOPPING=1", "STATUS=..." lines) when it runs the appliance as a
// Type=notify unit; without NOTIFY_SOCKET it does nothing. A name that
// starts with "@" is in the abstract namespace, which Go's unix addresses
// understand as is.
func notifySystemd(state string) error {
	addr := os.Getenv(notifySocketEnv)
	if addr == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify systemd at %s: %w", addr, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify systemd at %s: %w", addr, err)
	}
	return nil
}

// withoutNotifySocket is env minus NOTIFY_SOCKET: a child appliance (an
// upgrade's trial start) must not tell systemd it is the service.
func withoutNotifySocket(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, notifySocketEnv+"=") })
}
