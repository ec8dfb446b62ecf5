//go:build !linux

package relayconn

import "syscall"

// socketHolds is false where the queue cannot be read: reads return what
// one record holds, as without fillReads.
func socketHolds(syscall.RawConn) bool { return false }
