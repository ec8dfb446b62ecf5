package codersdk

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// socketHolds reports whether the kernel holds unread bytes for the socket
// (SIOCINQ).
func socketHolds(raw syscall.RawConn) bool {
	queued := 0
	_ = raw.Control(func(fd uintptr) {
		queued, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	})
	return queued > 0
}
