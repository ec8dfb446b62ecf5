package agent

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testrun"
)

// TestReportPortsOnClock: the agent reports the listening ports at once,
// then scans again exactly every PortsInterval on its clock: a port opened
// after the first report is reported at the next scan, which is due when
// the interval has passed, not a millisecond before.
func TestReportPortsOnClock(t *testing.T) {
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	scans := clock.Trap().NewTicker("agent", "ports")
	defer scans.Close()
	f, c := newFakeCoderd(t, codersdk.AgentManifest{})
	const interval = 5 * time.Second
	a, err := New(Options{Client: c, Logger: discardLogger(), Clock: clock, PortsInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	testrun.Background(t, "port scan", func(ctx context.Context) error {
		a.reportPorts(ctx)
		return nil
	})
	call := scans.MustWait(ctx)
	call.MustRelease(ctx)
	if call.Duration != interval {
		t.Errorf("ports are scanned every %s, want %s", call.Duration, interval)
	}
	f.waitFor(t, 10*time.Second, "the first scan's report", func() bool { return len(f.ports) > 0 })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	reported := func() bool { // f.mu held
		return slices.ContainsFunc(f.ports, func(r codersdk.PostAgentPortsRequest) bool {
			return slices.Contains(r.Ports, codersdk.AgentListeningPort{Network: "tcp", Port: port})
		})
	}
	clock.Advance(interval - time.Millisecond).MustWait(ctx)
	if d, ok := clock.Peek(); !ok || d != time.Millisecond {
		t.Errorf("a millisecond before the interval passed: next event in %s (%t), want the scan in 1ms", d, ok)
	}
	f.mu.Lock()
	early := reported()
	f.mu.Unlock()
	if early {
		t.Errorf("port %d reported before the next scan", port)
	}
	clock.Advance(time.Millisecond).MustWait(ctx)
	f.waitFor(t, 10*time.Second, "the new port reported at the next scan", reported)
}
