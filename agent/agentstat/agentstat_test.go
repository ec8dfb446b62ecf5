package agentstat

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/coder/quartz"
)

func TestResultString(t *testing.T) {
	for _, tc := range []struct {
		r    Result
		want string
	}{
		{Result{Used: 0.5, Total: float(2), Unit: "cores"}, "0.5/2 cores (25%)"},
		{Result{Used: 1.23456, Total: float(16), Unit: "cores"}, "1.23/16 cores (8%)"},
		{Result{Used: 0, Total: float(4), Unit: "cores"}, "0/4 cores (0%)"},
		{Result{Used: 1.2 * (1 << 30), Total: float(7.7 * (1 << 30)), Unit: "B", Prefix: PrefixGibi}, "1.2/7.7 GiB (16%)"},
		{Result{Used: 12 << 30, Total: float(98 << 30), Unit: "B", Prefix: PrefixGibi}, "12/98 GiB (12%)"},
		{Result{Used: 123.456 * (1 << 30), Total: float(1000 << 30), Unit: "B", Prefix: PrefixGibi}, "123/1000 GiB (12%)"},
		{Result{Used: 512 << 10, Total: float(1 << 20), Unit: "B", Prefix: PrefixMebi}, "0.5/1 MiB (50%)"},
		{Result{Used: 3, Unit: "cores"}, "3 cores"},
		{Result{Used: 1, Total: float(0), Unit: "B"}, "1/0 B"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.r, got, tc.want)
		}
	}
}

func TestParsePrefix(t *testing.T) {
	for s, want := range map[string]Prefix{"Ki": PrefixKibi, "Mi": PrefixMebi, "Gi": PrefixGibi, "Ti": PrefixTebi} {
		if got, err := ParsePrefix(s); err != nil || got != want || got.String() != s {
			t.Errorf("ParsePrefix(%q): got %v (%q), %v", s, got, got.String(), err)
		}
	}
	for _, s := range []string{"", "G", "KiB", "gi"} {
		if _, err := ParsePrefix(s); err == nil {
			t.Errorf("ParsePrefix(%q): no error", s)
		}
	}
}

func TestHostCPUFromProcStat(t *testing.T) {
	const before = `cpu  1000 0 1000 8000 0 0 0 0 0 0
cpu0 500 0 500 4000 0 0 0 0 0 0
cpu1 500 0 500 4000 0 0 0 0 0 0
intr 12345
ctxt 678
`
	// 300 busy ticks and 100 idle: three quarters of 2 CPUs.
	const after = `cpu  1200 0 1100 8050 50 0 0 0 40 0
cpu0 600 0 550 4025 25 0 0 0 20 0
cpu1 600 0 550 4025 25 0 0 0 20 0
intr 12399
`
	b, err := parseProcStat(before)
	if err != nil {
		t.Fatal(err)
	}
	a, err := parseProcStat(after)
	if err != nil {
		t.Fatal(err)
	}
	if got := hostCoresUsed(b, a); math.Abs(got-1.5) > 1e-9 || a.cpus != 2 {
		t.Errorf("got %v cores of %d, want 1.5 of 2", got, a.cpus)
	}
	if got := hostCoresUsed(a, a); got != 0 {
		t.Errorf("no time passed: got %v", got)
	}
	for _, bad := range []string{"", "intr 1\n", "cpu 1 2\ncpu0 1 2 3 4\n", "cpu a b c d\ncpu0 1 1 1 1\n"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
}

func TestParseCPUMax(t *testing.T) {
	for in, want := range map[string]float64{"max 100000": 0, "max": 0, "150000 100000": 1.5, "50000 100000": 0.5, "200000": 2} {
		if got, err := parseCPUMax(in); err != nil || got != want {
			t.Errorf("parseCPUMax(%q): got %v, %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x 100000", "100 0", "1 2 3"} {
		if _, err := parseCPUMax(in); err == nil {
			t.Errorf("parseCPUMax(%q): no error", in)
		}
	}
}

const meminfo = `MemTotal:       8000000 kB
MemFree:        1000000 kB
MemAvailable:   6000000 kB
Buffers:          10000 kB
Cached:         3000000 kB
`

// mountinfo lines of the usual layouts.
const (
	mountV2       = "30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
	mountV1Memory = "34 30 0:31 %s /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
	mountV1CPU    = "31 30 0:28 %s /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func dirEntry() *fstest.MapFile { return &fstest.MapFile{Mode: fs.ModeDir | 0o755} }

func TestContainerMemoryAndCPUQuota(t *testing.T) {
	for _, tc := range []struct {
		name          string
		fs            fstest.MapFS
		container     bool
		used, total   float64
		cores         float64 // the CPU quota; 0 for none
		wantQuotaErr  bool
		wantMemoryErr bool
	}{
		{
			name: "cgroup v2 with a namespace (Docker, Kubernetes)",
			fs: fstest.MapFS{
				".dockerenv":                            file(""),
				"proc/meminfo":                          file(meminfo),
				"proc/self/cgroup":                      file("0::/\n"),
				"proc/self/mountinfo":                   file(mountV2),
				"sys/fs/cgroup/cgroup.controllers":      file("cpuset cpu io memory pids\n"),
				"sys/fs/cgroup/memory.current":          file("1500000000\n"),
				"sys/fs/cgroup/memory.stat":             file("anon 1000000000\nfile 500000000\ninactive_file 300000000\nactive_file 200000000\n"),
				"sys/fs/cgroup/memory.max":              file("2000000000\n"),
				"sys/fs/cgroup/cpu.max":                 file("150000 100000\n"),
				"sys/fs/cgroup/cpu.stat":                file("usage_usec 123\n"),
				"sys/fs/cgroup/init.scope/memory.stat":  file("inactive_file 0\n"),
				"sys/fs/cgroup/init.scope/cgroup.procs": file("1\n"),
			},
			container: true, used: 1200000000, total: 2000000000, cores: 1.5,
		},
		{
			name: "cgroup v2, limits on the parent of a systemd scope, none on memory",
			fs: fstest.MapFS{
				"proc/meminfo":                                             file(meminfo),
				"proc/self/cgroup":                                         file("0::/workspaces.slice/dev.scope\n"),
				"proc/self/mountinfo":                                      file(mountV2),
				"proc/1/cgroup":                                            file("0::/init.scope\n"),
				"sys/fs/cgroup/cgroup.controllers":                         file("cpu memory\n"),
				"sys/fs/cgroup/workspaces.slice/cpu.max":                   file("250000 100000\n"),
				"sys/fs/cgroup/workspaces.slice/memory.max":                file("max\n"),
				"sys/fs/cgroup/workspaces.slice/dev.scope/cpu.max":         file("max 100000\n"),
				"sys/fs/cgroup/workspaces.slice/dev.scope/memory.max":      file("max\n"),
				"sys/fs/cgroup/workspaces.slice/dev.scope/memory.current":  file("4096000000\n"),
				"sys/fs/cgroup/workspaces.slice/dev.scope/memory.stat":     file("inactive_file 96000000\n"),
				"sys/fs/cgroup/workspaces.slice/dev.scope/cpu.stat":        file("usage_usec 1\n"),
				"sys/fs/cgroup/workspaces.slice/dev.scope/cgroup.procs":    file("42\n"),
				"sys/fs/cgroup/workspaces.slice/dev.scope/cgroup.type":     file("domain\n"),
				"sys/fs/cgroup/workspaces.slice/dev.scope/memory.events":   file(""),
				"sys/fs/cgroup/workspaces.slice/dev.scope/memory.pressure": file(""),
			},
			container: false, used: 4000000000, total: 8000000 * 1024, cores: 2.5,
		},
		{
			name: "cgroup v1 without a namespace (older Docker)",
			fs: fstest.MapFS{
				"proc/meminfo":        file(meminfo),
				"proc/1/cgroup":       file("12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n"),
				"proc/self/cgroup":    file("12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n0::/\n"),
				"proc/self/mountinfo": file(fmt.Sprintf(mountV1Memory, "/docker/abc") + fmt.Sprintf(mountV1CPU, "/docker/abc")),
				"sys/fs/cgroup/memory/memory.usage_in_bytes":      file("900000000\n"),
				"sys/fs/cgroup/memory/memory.limit_in_bytes":      file("1073741824\n"),
				"sys/fs/cgroup/memory/memory.stat":                file("cache 100\ninactive_file 1\nhierarchical_memory_limit 1073741824\ntotal_inactive_file 100000000\n"),
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":      file("50000\n"),
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us":     file("100000\n"),
				"sys/fs/cgroup/cpu,cpuacct/cpuacct.usage":         file("5\n"),
				"sys/fs/cgroup/cpu,cpuacct/cgroup.clone_children": file("0\n"),
			},
			container: true, used: 800000000, total: 1073741824, cores: 0.5,
		},
		{
			name: "cgroup v1 hybrid, in a child cgroup, no limits (this kind of sandbox)",
			fs: fstest.MapFS{
				".dockerenv":       file(""),
				"proc/meminfo":     file(meminfo),
				"proc/self/cgroup": file("4:memory:/jobs/j1\n2:cpuacct:/\n1:cpu:/\n0::/\n"),
				"proc/self/mountinfo": file("30 22 0:27 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n" +
					"31 30 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n" +
					"32 30 0:29 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n" +
					"34 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
					"40 30 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"),
				"sys/fs/cgroup/unified/cgroup.controllers":           file(""),
				"sys/fs/cgroup/memory/memory.limit_in_bytes":         file("9223372036854771712\n"),
				"sys/fs/cgroup/memory/jobs/j1/memory.usage_in_bytes": file("300000000\n"),
				"sys/fs/cgroup/memory/jobs/j1/memory.limit_in_bytes": file("9223372036854771712\n"),
				"sys/fs/cgroup/memory/jobs/j1/memory.stat":           file("inactive_file 73691136\ntotal_inactive_file 73691136\nhierarchical_memory_limit 9223372036854771712\n"),
				"sys/fs/cgroup/cpu/cpu.cfs_quota_us":                 file("-1\n"),
				"sys/fs/cgroup/cpu/cpu.cfs_period_us":                file("100000\n"),
				"sys/fs/cgroup/cpuacct/cpuacct.usage":                file("575564037277\n"),
			},
			container: true, used: 300000000 - 73691136, total: 8000000 * 1024, cores: 0,
		},
		{
			name: "no cgroup at all",
			fs: fstest.MapFS{
				"proc/meminfo": file(meminfo),
			},
			wantQuotaErr: true, wantMemoryErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Statter{FS: tc.fs, SampleInterval: time.Millisecond, NumCPU: func() int { return 4 }}
			if got := s.IsContainerized(); got != tc.container {
				t.Errorf("IsContainerized: got %v, want %v", got, tc.container)
			}
			m, err := s.ContainerMemory()
			if (err != nil) != tc.wantMemoryErr {
				t.Fatalf("ContainerMemory: %v", err)
			}
			if err == nil && (m.Used != tc.used || m.Total == nil || *m.Total != tc.total || m.Unit != "B") {
				t.Errorf("ContainerMemory: got %v of %v %s, want %v of %v B", m.Used, deref(m.Total), m.Unit, tc.used, tc.total)
			}
			q, err := s.cgroupCPUQuota()
			if (err != nil) != tc.wantQuotaErr {
				t.Fatalf("cgroupCPUQuota: %v", err)
			}
			if q != tc.cores {
				t.Errorf("CPU quota: got %v, want %v", q, tc.cores)
			}
			if tc.wantQuotaErr {
				return
			}
			c, err := s.ContainerCPU(context.Background())
			wantTotal := tc.cores
			if wantTotal == 0 {
				wantTotal = 4
			}
			if err != nil || c.Total == nil || *c.Total != wantTotal || c.Used != 0 || c.Unit != "cores" {
				t.Errorf("ContainerCPU: got %+v (total %v), %v; want 0 of %v cores (nothing ran)", c, deref(c.Total), err, wantTotal)
			}
		})
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// tickingFS serves base, except that name reads as next() each time.
type tickingFS struct {
	base fstest.MapFS
	name string
	next func() string
}

func (f tickingFS) Open(name string) (fs.File, error) {
	if name == f.name {
		return fstest.MapFS{name: file(f.next())}.Open(name)
	}
	return f.base.Open(name)
}

func TestContainerCPUUsage(t *testing.T) {
	var usec atomic.Int64
	fsys := tickingFS{
		base: fstest.MapFS{
			"proc/self/cgroup":                 file("0::/\n"),
			"proc/self/mountinfo":              file(mountV2),
			"sys/fs/cgroup/cgroup.controllers": file("cpu memory\n"),
			"sys/fs/cgroup/cpu.max":            file("200000 100000\n"),
		},
		name: "sys/fs/cgroup/cpu.stat",
		// Each read finds 100ms more CPU time: 100ms over a 200ms sample is
		// half a core.
		next: func() string { return fmt.Sprintf("usage_usec %d\nuser_usec 0\n", usec.Add(100000)) },
	}
	// The sample lasts 200ms on the clock, stepped once the sample waits.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clock := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	sampling := clock.Trap().NewTimer("agentstat", "sample")
	defer sampling.Close()
	s := &Statter{FS: fsys, SampleInterval: 200 * time.Millisecond, NumCPU: func() int { return 8 }, Clock: clock}
	type result struct {
		r   Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := s.ContainerCPU(ctx)
		done <- result{r, err}
	}()
	call := sampling.MustWait(ctx)
	call.MustRelease(ctx)
	if call.Duration != 200*time.Millisecond {
		t.Errorf("samples for %s, want the SampleInterval 200ms", call.Duration)
	}
	clock.Advance(call.Duration).MustWait(ctx)
	var got result
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatal("the sample did not end when the clock reached its end")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	if r := got.r; math.Abs(r.Used-0.5) > 1e-9 || *r.Total != 2 {
		t.Errorf("got %v of %v cores, want 0.5 of 2", r.Used, *r.Total)
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\`: `/x\`, `/t\011`: "/t\t", `/bad\09x`: `/bad\09x`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q): got %q, want %q", in, got, want)
		}
	}
}

func TestCgroupAncestors(t *testing.T) {
	c := cgroupDir{dir: "sys/fs/cgroup/a/b", top: "sys/fs/cgroup"}
	got := c.ancestors()
	want := []string{"sys/fs/cgroup/a/b", "sys/fs/cgroup/a", "sys/fs/cgroup"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// spin keeps one goroutine busy until the test ends.
func spin(t *testing.T) {
	t.Helper()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
		}
	})
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
	})
}
