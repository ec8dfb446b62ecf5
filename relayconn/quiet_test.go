package relayconn_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"airgapcoder/internal/testwait"
	"airgapcoder/relayconn"
)

// relayPair opens a raw relay connection to a server that accepts it as
// coderd does (AcceptUpgrade; over TLS on a BatchingListener when
// overTLS) and returns the client's and the server's ends.
func relayPair(t *testing.T, overTLS bool) (client, server net.Conn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := relayconn.AcceptUpgrade(w)
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- c
	}))
	if overTLS {
		srv.Listener = relayconn.BatchingListener(srv.Listener)
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	h := http.Header{}
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", relayconn.Protocol)
	client, err := relayconn.DialUpgrade(context.Background(), srv.Client(), u, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	select {
	case server = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not accept the upgrade")
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

// Quiet tells a waiting relay connection from one whose peer has sent
// something or closed it, over plain TCP and over TLS (where a close sends
// an alert first), without reading or waiting: coderd asks it before it
// takes an agent's spare connection.
func TestQuiet(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		name := map[bool]string{false: "tcp", true: "tls"}[overTLS]
		t.Run(name+"/waiting", func(t *testing.T) {
			_, server := relayPair(t, overTLS)
			for range 3 {
				if !relayconn.Quiet(server) {
					t.Fatal("a connection whose peer sent nothing is not quiet")
				}
			}
		})
		t.Run(name+"/peer sent a byte", func(t *testing.T) {
			client, server := relayPair(t, overTLS)
			if _, err := client.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
			waitNotQuiet(t, server)
			// Nothing was consumed: the byte is still there to read.
			b := make([]byte, 1)
			_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := server.Read(b); err != nil || b[0] != 1 {
				t.Fatalf("read after Quiet: %v %v", b, err)
			}
		})
		t.Run(name+"/peer closed", func(t *testing.T) {
			client, server := relayPair(t, overTLS)
			client.Close()
			waitNotQuiet(t, server)
		})
	}
}

// waitNotQuiet waits for what the peer did to reach c's socket.
func waitNotQuiet(t *testing.T, c net.Conn) {
	t.Helper()
	testwait.For(t, 5*time.Second, "what the peer did reaching the socket", func() (bool, string) {
		return !relayconn.Quiet(c), "still quiet"
	})
}
