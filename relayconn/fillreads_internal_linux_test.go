package relayconn

import (
	"net"
	"syscall"
	"unsafe"
)

// socketQueued is how many unread bytes the kernel holds for c's socket
// (SIOCINQ), for tests that wait for a peer's bytes to arrive.
func socketQueued(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var queued int32
	_ = raw.Control(func(fd uintptr) {
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&queued))); errno != 0 {
			queued = 0
		}
	})
	return int(queued)
}
