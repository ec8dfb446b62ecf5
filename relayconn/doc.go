// Package relayconn carries the relay's bytes: every connection between a
// user's CLI, coderd and a workspace agent goes through it on each hop.
//
// It owns the transport and nothing above it:
//
//   - the raw upgrade (Protocol, DialUpgrade, IsUpgrade, AcceptUpgrade):
//     an HTTP/1.1 Upgrade after which the connection carries bytes as they
//     are, with no WebSocket framing;
//   - how those bytes move fast over TLS and yamux: BatchingListener and
//     the record batcher under dialed connections (one syscall per write,
//     not per TLS record), fill reads (a read takes what the socket already
//     holds), CoalescedYamuxConn (a yamux frame's header and body in one
//     write), StreamWindow, QueuedWrites (a writer that does not wait for
//     each send), Quiet (is an idle connection still open);
//   - the copies (CopyBuffered, CopyPipelined) and the one splice every hop
//     uses (Splice, whose SpliceOptions name its close rules);
//   - the length-prefixed JSON frames that open a stream (WriteFrame,
//     ReadFrame), whatever they hold.
//
// It must not know the API: it imports only the standard library, not
// codersdk (whose types the frames carry and whose client dials through
// DialUpgrade), not coderd, the agent or the CLI, not yamux or a WebSocket
// library, and never a database driver. Who may connect, to what, and what
// is recorded are its callers' business. deps_test.go enforces the imports.
// docs/relay.md describes the protocol and the measurements behind each
// part.
package relayconn
