package agentstat

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// A process's cgroup for a controller ("cpu", "cpuacct", "memory") is found
// from /proc/self/cgroup (its path in each hierarchy) and
// /proc/self/mountinfo (where each hierarchy is mounted, and which part of
// it): with cgroup namespaces (Docker and Kubernetes on cgroup v2) the path
// is "/" and the mount is the container's own cgroup; without them the
// mount's root tells which part of the path the mount already is. A v1
// hierarchy that carries the controller wins over the v2 one (in the hybrid
// layout the v2 hierarchy has no controllers).

// cgroupDir is a controller's cgroup folder in a Statter's FS.
type cgroupDir struct {
	dir string // e.g. "sys/fs/cgroup" or "sys/fs/cgroup/memory/docker/abc"
	top string // the mount point: limits are looked for from dir up to here
	v2  bool
}

// ancestors lists dir and its parents up to the mount point.
func (c cgroupDir) ancestors() []string {
	dirs := []string{c.dir}
	for d := c.dir; d != c.top && strings.HasPrefix(d, c.top+"/"); {
		d = path.Dir(d)
		dirs = append(dirs, d)
	}
	return dirs
}

type mount struct {
	root, point, fstype string
	opts                []string
}

func (s *Statter) mounts() []mount {
	b, err := fs.ReadFile(s.FS, "proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []mount
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		out = append(out, mount{root: unescapeMount(f[3]), point: unescapeMount(f[4]), fstype: g[0], opts: strings.Split(g[2], ",")})
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupPaths reads /proc/self/cgroup: the v2 path ("" when none) and the
// v1 path of each controller.
func (s *Statter) cgroupPaths() (v2 string, v1 map[string]string, err error) {
	t, err := s.readFile("proc/self/cgroup")
	if err != nil {
		return "", nil, err
	}
	v1 = map[string]string{}
	for _, line := range strings.Split(t, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2 = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			v1[c] = f[2]
		}
	}
	return v2, v1, nil
}

// cgroup finds this process's cgroup folder for controller.
func (s *Statter) cgroup(controller string) (cgroupDir, error) {
	v2path, v1paths, err := s.cgroupPaths()
	if err != nil {
		return cgroupDir{}, fmt.Errorf("agentstat: not in a cgroup: %w", err)
	}
	mounts := s.mounts()
	for _, m := range mounts {
		if p, ok := v1paths[controller]; ok && m.fstype == "cgroup" && slices.Contains(m.opts, controller) {
			return s.cgroupIn(m, p, false), nil
		}
	}
	for _, m := range mounts {
		if m.fstype == "cgroup2" && v2path != "" {
			c := s.cgroupIn(m, v2path, true)
			if ctrls, err := s.readFile(path.Join(c.top, "cgroup.controllers")); err == nil && slices.Contains(strings.Fields(ctrls), controller) {
				return c, nil
			}
		}
	}
	// No mountinfo (or nothing matched): the usual places.
	if _, err := fs.Stat(s.FS, "sys/fs/cgroup/cgroup.controllers"); err == nil {
		return cgroupDir{dir: "sys/fs/cgroup", top: "sys/fs/cgroup", v2: true}, nil
	}
	dir := "sys/fs/cgroup/" + controller
	if _, err := fs.Stat(s.FS, dir); err == nil {
		return cgroupDir{dir: dir, top: dir}, nil
	}
	return cgroupDir{}, fmt.Errorf("agentstat: no cgroup %s controller is mounted", controller)
}

// cgroupIn is the folder of cgroup path p in mount m (its mount point when
// p is outside the part of the hierarchy m shows, or is not there).
func (s *Statter) cgroupIn(m mount, p string, v2 bool) cgroupDir {
	top := strings.TrimPrefix(path.Clean(m.point), "/")
	c := cgroupDir{dir: top, top: top, v2: v2}
	rel, ok := strings.CutPrefix(p, m.root)
	if m.root == "/" {
		rel, ok = p, true
	}
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return c
	}
	dir := path.Join(top, rel)
	if st, err := fs.Stat(s.FS, dir); err == nil && st.IsDir() {
		c.dir = dir
	}
	return c
}

// IsContainerized reports whether this process runs in a container: a
// /.dockerenv or /run/.containerenv file, a container runtime named in
// /proc/1/cgroup, or a container= variable in PID 1's environment
// (systemd-nspawn, LXC, Podman).
func (s *Statter) IsContainerized() bool {
	for _, f := range []string{".dockerenv", "run/.containerenv"} {
		if _, err := fs.Stat(s.FS, f); err == nil {
			return true
		}
	}
	if b, err := fs.ReadFile(s.FS, "proc/1/cgroup"); err == nil {
		for _, w := range []string{"docker", "kubepods", "containerd", "libpod", "lxc", "garden"} {
			if bytes.Contains(b, []byte(w)) {
				return true
			}
		}
	}
	if b, err := fs.ReadFile(s.FS, "proc/1/environ"); err == nil {
		for _, kv := range bytes.Split(b, []byte{0}) {
			if bytes.HasPrefix(kv, []byte("container=")) {
				return true
			}
		}
	}
	return false
}
