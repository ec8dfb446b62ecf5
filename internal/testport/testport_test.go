package testport_test

import (
	"net"
	"strconv"
	"testing"

	"airgapcoder/internal/testport"
)

// TestPort: ports are bindable, below the ephemeral range, never repeated.
func TestPort(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p := testport.Port(t)
		if p < 20000 || p >= 32768 {
			t.Fatalf("port %d outside [20000, 32768)", p)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	addr := testport.Addr(t)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	ln.Close()
	if _, port, _ := net.SplitHostPort(addr); port == "" {
		t.Fatalf("address %q has no port", addr)
	} else if _, err := strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
}
