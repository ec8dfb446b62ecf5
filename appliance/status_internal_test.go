package appliance

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestServerOpenFiles finds this process by a port it listens on and reads
// its open file limit from /proc, as status does for coderd, with the soft
// limit lowered so that it warns.
func TestServerOpenFiles(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })
	lowered := orig
	lowered.Cur = min(orig.Max, 2048)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}

	got := serverOpenFiles(ln.Addr().String())
	want := OpenFileLimit{PID: os.Getpid(), Soft: lowered.Cur, Hard: lowered.Max, AgentsAtMost: lowered.Cur / 3}
	if got.PID != want.PID || got.Soft != want.Soft || got.Hard != want.Hard || got.AgentsAtMost != want.AgentsAtMost || got.Error != "" {
		t.Fatalf("got %+v, want %+v", *got, want)
	}
	if !strings.Contains(got.Warning, "room for about 682 agents") {
		t.Errorf("got warning %q, want one for 682 agents", got.Warning)
	}

	ln.Close()
	if got := serverOpenFiles(ln.Addr().String()); got.PID != 0 || !strings.Contains(got.Error, "not running") {
		t.Errorf("nothing listening: got %+v, want coderd not running", *got)
	}
}

// TestOpenFileLimit checks the agents a limit leaves room for and the
// warning below 1,000 of them.
func TestOpenFileLimit(t *testing.T) {
	tests := []struct {
		soft, hard uint64
		agents     uint64
		warns      bool
	}{
		{1024, 4096, 341, true},
		{2999, 2999, 999, true},
		{3000, 3000, 1000, false},
		{65536, 65536, 21845, false},
		{^uint64(0), ^uint64(0), ^uint64(0) / 3, false},
	}
	for _, tt := range tests {
		l := openFileLimit(1, tt.soft, tt.hard)
		if l.AgentsAtMost != tt.agents || (l.Warning != "") != tt.warns {
			t.Errorf("soft %d: got %d agents, warning %q; want %d agents, warning %v", tt.soft, l.AgentsAtMost, l.Warning, tt.agents, tt.warns)
		}
	}
	for in, want := range map[string]uint64{"unlimited": ^uint64(0), "20000": 20000} {
		if got, err := parseLimit(in); err != nil || got != want {
			t.Errorf("parseLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}
