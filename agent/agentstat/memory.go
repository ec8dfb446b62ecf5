package agentstat

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// HostMemory reads /proc/meminfo: MemTotal - MemAvailable out of MemTotal
// (what free(1) calls used), in bytes.
func (s *Statter) HostMemory() (Result, error) {
	total, available, err := s.meminfo()
	if err != nil {
		return Result{}, err
	}
	return Result{Used: float64(total - available), Total: float(float64(total)), Unit: "B"}, nil
}

// meminfo returns MemTotal and MemAvailable in bytes.
func (s *Statter) meminfo() (total, available uint64, err error) {
	t, err := s.readFile("proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("agentstat: read the host's memory: %w", err)
	}
	kb := map[string]uint64{}
	for _, line := range strings.Split(t, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		if n, err := strconv.ParseUint(f[0], 10, 64); err == nil {
			kb[k] = n
		}
	}
	total, ok := kb["MemTotal"]
	if !ok || total == 0 {
		return 0, 0, errors.New("agentstat: /proc/meminfo has no MemTotal")
	}
	avail, ok := kb["MemAvailable"]
	if !ok { // kernels before 3.14
		avail = kb["MemFree"] + kb["Buffers"] + kb["Cached"]
	}
	return total * 1024, min(avail, total) * 1024, nil
}

// ContainerMemory reads this process's cgroup: what it uses, not counting
// the inactive page cache the kernel reclaims first (memory.current -
// inactive_file on v2, memory.usage_in_bytes - total_inactive_file on v1),
// out of its limit (the smallest up the hierarchy), or out of the host's
// memory when there is none.
func (s *Statter) ContainerMemory() (Result, error) {
	c, err := s.cgroup("memory")
	if err != nil {
		return Result{}, err
	}
	hostTotal, _, err := s.meminfo()
	if err != nil {
		return Result{}, err
	}
	var usage, inactive, limit int64
	stat, err := s.readKeyed(path.Join(c.dir, "memory.stat"))
	if err != nil {
		return Result{}, fmt.Errorf("agentstat: read the cgroup's memory: %w", err)
	}
	if c.v2 {
		if usage, err = s.readInt(path.Join(c.dir, "memory.current")); err != nil {
			return Result{}, fmt.Errorf("agentstat: read the cgroup's memory: %w", err)
		}
		inactive = stat["inactive_file"]
		for _, dir := range c.ancestors() {
			t, err := s.readFile(path.Join(dir, "memory.max"))
			if errors.Is(err, fs.ErrNotExist) || t == "max" {
				continue
			}
			if err != nil {
				return Result{}, err
			}
			n, err := strconv.ParseInt(t, 10, 64)
			if err != nil {
				return Result{}, fmt.Errorf("agentstat: %s/memory.max %q: %w", dir, t, err)
			}
			if limit == 0 || n < limit {
				limit = n
			}
		}
	} else {
		if usage, err = s.readInt(path.Join(c.dir, "memory.usage_in_bytes")); err != nil {
			return Result{}, fmt.Errorf("agentstat: read the cgroup's memory: %w", err)
		}
		var ok bool
		if inactive, ok = stat["total_inactive_file"]; !ok {
			inactive = stat["inactive_file"]
		}
		// hierarchical_memory_limit is already the smallest up the
		// hierarchy.
		if limit = stat["hierarchical_memory_limit"]; limit == 0 {
			if limit, err = s.readInt(path.Join(c.dir, "memory.limit_in_bytes")); err != nil {
				return Result{}, fmt.Errorf("agentstat: read the cgroup's memory limit: %w", err)
			}
		}
	}
	usage -= min(inactive, usage)
	total := float64(hostTotal)
	if limit > 0 && float64(limit) < total {
		total = float64(limit)
	}
	return Result{Used: float64(usage), Total: float(total), Unit: "B"}, nil
}
