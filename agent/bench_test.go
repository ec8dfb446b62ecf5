package agent_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// The relay against the obvious alternative, measured in the same run: a
// direct loopback TCP connection. The relayed path is the one coder
// port-forward and dev URLs take: a client WebSocket to coderd, a yamux
// stream over the agent's WebSocket, and the agent's TCP connection to the
// port (coderd, the agent and the client share this process and its cores).
//
//	go test ./agent/ -run '^$' -bench Relay -benchtime 3x

// relayBenchSize is the bulk transfer of BenchmarkRelayThroughput.
const relayBenchSize = 256 << 20

// sinkServer reads an 8-byte length, then that many bytes, and answers with
// one byte; it echoes single bytes on connections that send a zero length.
func sinkServer(b *testing.B) int {
	b.Helper()
	return coderdtest.ServeTCP(b, func(c net.Conn) {
		var n [8]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		size := int64(binary.BigEndian.Uint64(n[:]))
		if size == 0 {
			_, _ = io.Copy(c, c)
			return
		}
		if _, err := io.CopyN(io.Discard, c, size); err != nil {
			return
		}
		_, _ = c.Write([]byte{1})
	})
}

// transfer sends size bytes over conn and waits for the sink's answer.
func transfer(b *testing.B, conn net.Conn, size int64, buf []byte) time.Duration {
	b.Helper()
	began := time.Now()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(size))
	if _, err := conn.Write(n[:]); err != nil {
		b.Fatal(err)
	}
	for sent := int64(0); sent < size; {
		chunk := buf[:min(int64(len(buf)), size-sent)]
		if _, err := conn.Write(chunk); err != nil {
			b.Fatal(err)
		}
		sent += int64(len(chunk))
	}
	if _, err := io.ReadFull(conn, n[:1]); err != nil {
		b.Fatal(err)
	}
	return time.Since(began)
}

// BenchmarkRelayThroughput moves 256 MiB through the relay and through a
// direct loopback connection, and reports both rates and their ratio.
func BenchmarkRelayThroughput(b *testing.B) {
	e := newRelayEnv(b)
	e.waitReady(b, e.alice)
	port := sinkServer(b)
	buf := make([]byte, 256<<10)
	var direct, relayed time.Duration
	b.ResetTimer()
	for range b.N {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			b.Fatal(err)
		}
		direct += transfer(b, c, relayBenchSize, buf)
		c.Close()
		rc, err := e.alice.DialWorkspaceAgent(context.Background(), e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(port)})
		if err != nil {
			b.Fatal(err)
		}
		relayed += transfer(b, rc, relayBenchSize, buf)
		rc.Close()
	}
	mib := float64(relayBenchSize) / (1 << 20) * float64(b.N)
	b.ReportMetric(mib/direct.Seconds(), "direct-MiB/s")
	b.ReportMetric(mib/relayed.Seconds(), "relay-MiB/s")
	b.ReportMetric(relayed.Seconds()/direct.Seconds(), "relay/direct-time")
}

// BenchmarkRelayConnect opens a connection and completes one round trip,
// through the relay and directly, and reports both latencies and their
// ratio.
func BenchmarkRelayConnect(b *testing.B) {
	e := newRelayEnv(b)
	e.waitReady(b, e.alice)
	port := sinkServer(b)
	roundTrip := func(c net.Conn) {
		var msg [9]byte // a zero length, then one byte echoed
		msg[8] = 'x'
		if _, err := c.Write(msg[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, msg[:1]); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	var direct, relayed time.Duration
	b.ResetTimer()
	for range b.N {
		began := time.Now()
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			b.Fatal(err)
		}
		roundTrip(c)
		direct += time.Since(began)
		began = time.Now()
		rc, err := e.alice.DialWorkspaceAgent(context.Background(), e.agentID, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: uint16(port)})
		if err != nil {
			b.Fatal(err)
		}
		roundTrip(rc)
		relayed += time.Since(began)
	}
	n := float64(b.N)
	b.ReportMetric(float64(direct.Microseconds())/n, "direct-µs/conn")
	b.ReportMetric(float64(relayed.Microseconds())/n, "relay-µs/conn")
	b.ReportMetric(relayed.Seconds()/direct.Seconds(), "relay/direct-time")
}
