package testregions

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRegions checks the link's shape: a round trip across is twice the
// delay (and not much more), one within a region is far below it, and a
// process started in a region sees its address.
func TestRegions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the regions are network namespaces and TUN devices: run as root (CI does)")
	}
	const delay = 20 * time.Millisecond
	r := New(t, Options{Prefix: "testregions", Delay: delay})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	across, err := RoundTrip(ctx, r.B, r.A, 20)
	if err != nil {
		t.Fatal(err)
	}
	within, err := RoundTrip(ctx, r.B, r.B, 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("round trip across: %s, within B: %s (one-way delay %s)", across, within, delay)
	if across < 2*delay || across > 2*delay+15*time.Millisecond {
		t.Errorf("round trip across: got %s, want about %s", across, 2*delay)
	}
	if within > 5*time.Millisecond {
		t.Errorf("round trip within a region: got %s, want well below a millisecond or so", within)
	}
	out, err := r.B.Command(nil, "ip", "-o", "-4", "addr", "show", "dev", "wan0").CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr in %s: %v\n%s", r.B.Name, err, out)
	}
	if want := AddrB + "/24"; !strings.Contains(string(out), want) {
		t.Errorf("ip addr in %s: got %q, want %s", r.B.Name, out, want)
	}
}
