//go:build unix

package relayconn

import "syscall"

// socketQuiet peeks at the socket without waiting: quiet when a read
// would block, not when a byte or the peer's close (a read of 0) waits.
func socketQuiet(raw syscall.RawConn) bool {
	quiet := false
	err := raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		quiet = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // done: never wait for readability
	})
	return err == nil && quiet
}
