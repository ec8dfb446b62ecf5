// Package testport picks loopback ports for tests that must name a port
// before anything listens on it (a setting in a config file, a flag of a
// process started later). A port from a ":0" listener is in the kernel's
// ephemeral range, where any outgoing connection or another test's ":0"
// listener may take it before the server binds it; the ports here come
// from below that range and are never handed out twice by one process.
// It is for tests only: products listen on ":0" or on what they are told.
package testport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowest is the bottom of the range ports are picked from.
const lowest = 20000

var (
	mu     sync.Mutex
	issued = map[int]bool{}
)

// Port returns a loopback TCP port that is free now and below the
// ephemeral range.
func Port(t testing.TB) int {
	t.Helper()
	top := ephemeralStart() - 1
	mu.Lock()
	defer mu.Unlock()
	for range 200 {
		p := lowest + rand.IntN(top-lowest+1)
		if issued[p] {
			continue
		}
		// Free on every interface: tests also listen on wildcard
		// addresses.
		ln, err := net.Listen("tcp", net.JoinHostPort("0.0.0.0", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		issued[p] = true
		return p
	}
	t.Fatalf("testport: no free port between %d and %d", lowest, top)
	return 0
}

// Addr returns "127.0.0.1:PORT" for a Port.
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t)))
}

// ephemeralStart is the first port of the kernel's ephemeral range
// (32768 when it cannot be read).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= lowest+1000 {
		return 32768
	}
	return n
}
