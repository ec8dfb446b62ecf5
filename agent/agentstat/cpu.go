package agentstat

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// HostCPU measures the host's CPU use over SampleInterval from /proc/stat:
// the busy share of all CPU time times the number of CPUs, out of that
// number.
func (s *Statter) HostCPU(ctx context.Context) (Result, error) {
	before, err := s.procStat()
	if err != nil {
		return Result{}, err
	}
	if err := s.sample(ctx); err != nil {
		return Result{}, err
	}
	after, err := s.procStat()
	if err != nil {
		return Result{}, err
	}
	return Result{Used: hostCoresUsed(before, after), Total: float(float64(after.cpus)), Unit: "cores"}, nil
}

// procStatSample is the aggregate "cpu" line of /proc/stat (in clock ticks)
// and the number of "cpuN" lines.
type procStatSample struct {
	busy, idle uint64
	cpus       int
}

func (s *Statter) procStat() (procStatSample, error) {
	t, err := s.readFile("proc/stat")
	if err != nil {
		return procStatSample{}, fmt.Errorf("agentstat: read the host's CPU times: %w", err)
	}
	return parseProcStat(t)
}

func parseProcStat(t string) (procStatSample, error) {
	var p procStatSample
	found := false
	for _, line := range strings.Split(t, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "cpu":
			// user nice system idle iowait irq softirq steal [guest guest_nice]:
			// guest time is already counted in user and nice.
			if len(f) < 5 {
				return p, errors.New("agentstat: short cpu line in /proc/stat")
			}
			for i, v := range f[1:min(len(f), 9)] {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return p, fmt.Errorf("agentstat: cpu line of /proc/stat: %w", err)
				}
				if i == 3 || i == 4 { // idle, iowait
					p.idle += n
				} else {
					p.busy += n
				}
			}
			found = true
		case strings.HasPrefix(f[0], "cpu"):
			p.cpus++
		}
	}
	if !found || p.cpus == 0 {
		return p, errors.New("agentstat: no cpu lines in /proc/stat")
	}
	return p, nil
}

// hostCoresUsed is how many cores were busy between two samples.
func hostCoresUsed(before, after procStatSample) float64 {
	busy := float64(after.busy - before.busy)
	total := busy + float64(after.idle-before.idle)
	if total <= 0 {
		return 0
	}
	return busy / total * float64(after.cpus)
}

// ContainerCPU measures the CPU use of this process's cgroup over
// SampleInterval (cpu.stat usage_usec on v2, cpuacct.usage on v1), out of
// its quota (cpu.max, or cpu.cfs_quota_us / cpu.cfs_period_us; the
// smallest up the hierarchy), or out of NumCPU when there is none.
func (s *Statter) ContainerCPU(ctx context.Context) (Result, error) {
	usage, err := s.cgroupCPUUsage()
	if err != nil {
		return Result{}, err
	}
	before, began := 0.0, s.clock().Now()
	if before, err = usage(); err != nil {
		return Result{}, err
	}
	if err := s.sample(ctx); err != nil {
		return Result{}, err
	}
	after, err := usage()
	if err != nil {
		return Result{}, err
	}
	total, err := s.cgroupCPUQuota()
	if err != nil {
		return Result{}, err
	}
	if total <= 0 {
		total = float64(s.NumCPU())
	}
	used := (after - before) / s.clock().Since(began).Seconds()
	return Result{Used: max(0, used), Total: float(total), Unit: "cores"}, nil
}

// cgroupCPUUsage returns a reader of the cgroup's CPU time in seconds.
func (s *Statter) cgroupCPUUsage() (func() (float64, error), error) {
	c, err := s.cgroup("cpu")
	if err != nil {
		return nil, err
	}
	if c.v2 {
		name := path.Join(c.dir, "cpu.stat")
		return func() (float64, error) {
			m, err := s.readKeyed(name)
			if err != nil {
				return 0, fmt.Errorf("agentstat: read the cgroup's CPU time: %w", err)
			}
			us, ok := m["usage_usec"]
			if !ok {
				return 0, fmt.Errorf("agentstat: %s has no usage_usec", name)
			}
			return float64(us) / 1e6, nil
		}, nil
	}
	acct, err := s.cgroup("cpuacct")
	if err != nil {
		return nil, err
	}
	name := path.Join(acct.dir, "cpuacct.usage")
	return func() (float64, error) {
		ns, err := s.readInt(name)
		if err != nil {
			return 0, fmt.Errorf("agentstat: read the cgroup's CPU time: %w", err)
		}
		return float64(ns) / 1e9, nil
	}, nil
}

// cgroupCPUQuota returns the smallest CPU quota in cores from the cgroup up
// to the top of its hierarchy, or 0 when none is set.
func (s *Statter) cgroupCPUQuota() (float64, error) {
	c, err := s.cgroup("cpu")
	if err != nil {
		return 0, err
	}
	quota := 0.0
	for _, dir := range c.ancestors() {
		var q float64
		if c.v2 {
			t, err := s.readFile(path.Join(dir, "cpu.max"))
			if errors.Is(err, fs.ErrNotExist) {
				continue // the root cgroup has none
			}
			if err != nil {
				return 0, err
			}
			if q, err = parseCPUMax(t); err != nil {
				return 0, err
			}
		} else {
			us, err := s.readInt(path.Join(dir, "cpu.cfs_quota_us"))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, err
			}
			period, err := s.readInt(path.Join(dir, "cpu.cfs_period_us"))
			if err != nil {
				return 0, err
			}
			if us > 0 && period > 0 {
				q = float64(us) / float64(period)
			}
		}
		if q > 0 && (quota == 0 || q < quota) {
			quota = q
		}
	}
	return quota, nil
}

// parseCPUMax reads cgroup v2's cpu.max ("max 100000" or "200000 100000")
// as cores; 0 means no quota.
func parseCPUMax(t string) (float64, error) {
	f := strings.Fields(t)
	if len(f) == 0 || len(f) > 2 {
		return 0, fmt.Errorf("agentstat: cpu.max %q", t)
	}
	if f[0] == "max" {
		return 0, nil
	}
	quota, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("agentstat: cpu.max %q: %w", t, err)
	}
	period := 100000.0
	if len(f) == 2 {
		if period, err = strconv.ParseFloat(f[1], 64); err != nil || period <= 0 {
			return 0, fmt.Errorf("agentstat: cpu.max %q: bad period", t)
		}
	}
	return quota / period, nil
}

// sample waits SampleInterval on the clock, or until ctx ends (its error).
func (s *Statter) sample(ctx context.Context) error {
	t := s.clock().NewTimer(s.SampleInterval, "agentstat", "sample")
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
