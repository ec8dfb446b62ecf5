package appliance

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestNotifySystemd(t *testing.T) {
	t.Run("NoSocket", func(t *testing.T) {
		t.Setenv(notifySocketEnv, "")
		if err := notifySystemd("READY=1"); err != nil {
			t.Errorf("without NOTIFY_SOCKET: got %v, want nil", err)
		}
	})
	t.Run("Sends", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "notify.sock")
		conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		t.Setenv(notifySocketEnv, path)
		if err := notifySystemd("READY=1\nSTATUS=serving"); err != nil {
			t.Fatal(err)
		}
		if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 256)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(buf[:n]), "READY=1\nSTATUS=serving"; got != want {
			t.Errorf("systemd heard %q, want %q", got, want)
		}
	})
	t.Run("NobodyListens", func(t *testing.T) {
		t.Setenv(notifySocketEnv, filepath.Join(t.TempDir(), "absent.sock"))
		if err := notifySystemd("READY=1"); err == nil {
			t.Error("to a socket nobody listens on: got nil, want an error")
		}
	})
}

func TestWatchdogInterval(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		name      string
		usec, pid string
		want      time.Duration
	}{
		{"Unwatched", "", "", 0},
		{"Watched", "2000000", "", time.Second},
		{"WatchedPID", "2000000", self, time.Second},
		{"AnotherPID", "2000000", strconv.Itoa(os.Getpid() + 1), 0},
		{"Malformed", "soon", "", 0},
		{"Zero", "0", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WATCHDOG_USEC", tc.usec)
			t.Setenv("WATCHDOG_PID", tc.pid)
			if got := watchdogInterval(); got != tc.want {
				t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: got %v, want %v", tc.usec, tc.pid, got, tc.want)
			}
		})
	}
}

// TestWithoutNotifySocketWatchdog: a child appliance hears of the watchdog
// (WATCHDOG_USEC) but not of the main process's pid, which would make it
// think systemd does not watch it.
func TestWithoutNotifySocketWatchdog(t *testing.T) {
	env := []string{"PATH=/usr/bin", "NOTIFY_SOCKET=/run/systemd/notify", "WATCHDOG_USEC=30000000", "WATCHDOG_PID=1234"}
	got := withoutNotifySocket(env)
	want := []string{"PATH=/usr/bin", "WATCHDOG_USEC=30000000"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if len(env) != 4 {
		t.Errorf("the caller's environment changed: %q", env)
	}
}
