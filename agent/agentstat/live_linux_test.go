package agentstat

import (
	"context"
	"math"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// These tests measure this machine and check the numbers against tools and
// system calls that count the same things independently.

func newStatter(t *testing.T) *Statter {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// command runs name args and returns the fields of its output's lines.
func command(t *testing.T, name string, args ...string) [][]string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	var lines [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		lines = append(lines, strings.Fields(l))
	}
	return lines
}

func number(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestDiskAgainstDf(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{"/", dir} {
		r, err := Disk(path)
		if err != nil {
			t.Fatal(err)
		}
		// df -B1 --output=size,used: a header, then bytes.
		df := command(t, "df", "-B1", "--output=size,used", path)[1]
		size, used := number(t, df[0]), number(t, df[1])
		if *r.Total != size {
			t.Errorf("%s: total %v, df says %v", path, *r.Total, size)
		}
		// Others write to the disk meanwhile: 1% of its size.
		if math.Abs(r.Used-used) > size/100 {
			t.Errorf("%s: used %v, df says %v", path, r.Used, used)
		}
		if r.Unit != "B" {
			t.Errorf("unit %q", r.Unit)
		}
	}
	if _, err := Disk("/no/such/folder"); err == nil {
		t.Error("Disk of a missing folder: no error")
	}
}

func TestHostMemoryAgainstFreeAndSysinfo(t *testing.T) {
	r, err := newStatter(t).HostMemory()
	if err != nil {
		t.Fatal(err)
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	if total := float64(si.Totalram) * float64(si.Unit); *r.Total != total {
		t.Errorf("total %v, sysinfo(2) says %v", *r.Total, total)
	}
	// free -b: "Mem: total used free shared buff/cache available", where
	// used is total - available.
	mem := command(t, "free", "-b")[1]
	if total := number(t, mem[1]); *r.Total != total {
		t.Errorf("total %v, free says %v", *r.Total, total)
	}
	if used := number(t, mem[2]); math.Abs(r.Used-used) > *r.Total*0.03 {
		t.Errorf("used %v, free says %v", r.Used, used)
	}
}

func TestHostCPUAgainstGetconf(t *testing.T) {
	spin(t) // at least a good part of one core is busy
	r, err := newStatter(t).HostCPU(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	online := number(t, command(t, "getconf", "_NPROCESSORS_ONLN")[0][0])
	if *r.Total != online {
		t.Errorf("total %v cores, getconf says %v online", *r.Total, online)
	}
	if r.Used < 0.3 || r.Used > *r.Total+0.01 {
		t.Errorf("used %v of %v cores while a goroutine spins", r.Used, *r.Total)
	}
}

func TestContainerStatsOfThisProcess(t *testing.T) {
	s := newStatter(t)
	host, err := s.HostMemory()
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.ContainerMemory()
	if err != nil {
		t.Fatal(err)
	}
	if m.Used <= 0 || m.Used > *m.Total || *m.Total > *host.Total {
		t.Errorf("cgroup memory %v of %v bytes (host %v)", m.Used, *m.Total, *host.Total)
	}
	spin(t)
	c, err := s.ContainerCPU(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if *c.Total <= 0 || *c.Total > float64(runtime.NumCPU()) || c.Used < 0.3 {
		t.Errorf("cgroup CPU %v of %v cores while a goroutine of this process spins", c.Used, *c.Total)
	}
}
