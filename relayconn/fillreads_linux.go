package relayconn

import (
	"syscall"
	"unsafe"
)

// socketHolds reports whether the kernel holds unread bytes for the socket
// (SIOCINQ, which is TIOCINQ's number).
func socketHolds(raw syscall.RawConn) bool {
	var queued int32
	_ = raw.Control(func(fd uintptr) {
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&queued))); errno != 0 {
			queued = 0
		}
	})
	return queued > 0
}
