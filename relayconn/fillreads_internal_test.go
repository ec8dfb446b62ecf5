package relayconn

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"airgapcoder/internal/testwait"
)

// TestFillReads: over TLS one read returns one record (16 KiB); a relay
// reading through fillReads gets what the socket already holds in one
// read, and a read with nothing more to come returns what it has at once.
func TestFillReads(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the socket's queue is read with SIOCINQ, a Linux ioctl; elsewhere reads are left as they are")
	}
	ln := tlsListener(t)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(payload[:100])
		var ack [1]byte
		if _, err := c.Read(ack[:]); err != nil {
			return
		}
		_, _ = c.Write(payload)
		_, _ = c.Read(ack[:])
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}) // the test's own server
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := fillReads(conn, conn.NetConn())
	buf := make([]byte, 256<<10)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := r.Read(buf); n != 100 || err != nil {
		t.Fatalf("first read: %d bytes, %v; want the 100 sent, at once", n, err)
	}
	if _, err := conn.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	// More than two records of the megabyte are in the socket.
	testwait.For(t, 10*time.Second, "the megabyte arriving in the socket", func() (bool, string) {
		n := socketQueued(conn.NetConn())
		return n > 32<<10, fmt.Sprintf("%d bytes queued", n)
	})
	n, err := r.Read(buf)
	if err != nil || n <= 16<<10 {
		t.Fatalf("read with the socket full: %d bytes, %v; want more than one record (16 KiB)", n, err)
	}
	got := append([]byte(nil), buf[:n]...)
	rest := make([]byte, len(payload)-n)
	if _, err := io.ReadFull(r, rest); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(got, rest...), payload) {
		t.Fatal("the bytes read differ from those sent")
	}
	_, _ = conn.Write([]byte{1})
}

// tlsListener listens with TLS on loopback, with a certificate clients
// take on trust (InsecureSkipVerify: the test's own server).
func tlsListener(t *testing.T) net.Listener {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS() // for its certificate
	t.Cleanup(srv.Close)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv.TLS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}
