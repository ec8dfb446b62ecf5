package relayconn

import (
	"crypto/tls"
	"net"
	"syscall"
)

// Quiet reports whether a relay connection on which the peer is to send
// nothing yet still holds nothing to read and has not been closed by the
// peer: it asks the connection's socket without reading or waiting. A
// connection it cannot see through (a WebSocket) is taken as quiet. coderd
// asks it of an agent's spare connection before it takes one for a user's
// connection: a spare the agent or a proxy between closed while it waited
// is thrown away instead of failing the user's connection.
func Quiet(c net.Conn) bool {
	for {
		switch x := c.(type) {
		case *upgradedConn:
			c = x.raw
		case *bufferedConn:
			if x.r.Buffered() > 0 {
				return false
			}
			c = x.Conn
		case *tls.Conn:
			c = x.NetConn()
		case *recordBatcher:
			c = x.Conn
		case syscall.Conn:
			raw, err := x.SyscallConn()
			if err != nil {
				return false
			}
			return socketQuiet(raw)
		default:
			return true
		}
	}
}
