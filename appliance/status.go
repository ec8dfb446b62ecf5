package appliance

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"airgapcoder/bundle"
	"airgapcoder/certs"
	"airgapcoder/codersdk"
)

// Status is what `coder appliance status` shows.
type Status struct {
	Dir string `json:"dir"`
	// Role is appliance.yaml's role: "primary" or "proxy".
	Role       string      `json:"role"`
	Bundle     string      `json:"bundle"`
	Release    string      `json:"release"`
	Previous   string      `json:"previous,omitempty"`
	Providers  int         `json:"providers"`
	Images     int         `json:"images"`
	Templates  int         `json:"templates"`
	DiskUsed   int64       `json:"disk_used_bytes"`
	DiskFree   int64       `json:"disk_free_bytes"`
	Components []Component `json:"components"`
	// OpenFiles is the running coderd's limit on open files; nil on a
	// proxy (which runs no coderd).
	OpenFiles *OpenFileLimit `json:"open_files,omitempty"`
}

// OpenFileLimit is the limit on open files (RLIMIT_NOFILE) of the process
// that listens on tls-address, read from /proc/PID/limits, and how many
// agents it leaves room for. coderd raises its soft limit to the hard
// limit at start (controlplane's raiseFileLimit, which logs the same
// figures).
type OpenFileLimit struct {
	// PID is the process; 0 when none was found (Error says why).
	PID int `json:"pid,omitempty"`
	// Soft and Hard are the limits; math.MaxUint64 is "unlimited".
	Soft uint64 `json:"soft,omitempty"`
	Hard uint64 `json:"hard,omitempty"`
	// AgentsAtMost is Soft divided by the sockets every connected agent
	// holds open in coderd (its relay connection and its
	// codersdk.AgentSpareConns spares).
	AgentsAtMost uint64 `json:"agents_at_most,omitempty"`
	// Warning is set when AgentsAtMost is below LowAgentLimit; empty
	// otherwise.
	Warning string `json:"warning,omitempty"`
	// Error says why the limit could not be read (coderd not running, or
	// its process not readable by this user); empty when it was.
	Error string `json:"error,omitempty"`
}

// LowAgentLimit is the number of agents below which status warns about the
// open file limit, as coderd does when it starts.
const LowAgentLimit = 1000

// fdsPerAgent is what one connected agent holds open in coderd.
const fdsPerAgent = 1 + codersdk.AgentSpareConns

// Component is one part's health.
type Component struct {
	Name string `json:"name"`
	// State is "ok", "down" or "unknown"; a proxy's wsproxy is also
	// "starting" (its /healthz answers 503: not registered with the
	// primary yet, or not ready otherwise; Detail says why) or
	// "unhealthy" (its own health report has errors).
	State   string `json:"state"`
	Version string `json:"version,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// GetStatus reads the installed releases and probes the running components.
func GetStatus(ctx context.Context, dir string) (Status, error) {
	st, _, err := getStatus(ctx, dir)
	return st, err
}

// getStatus is GetStatus, also returning the current release's manifest.
func getStatus(ctx context.Context, dir string) (Status, bundle.Manifest, error) {
	var m bundle.Manifest
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Status{}, m, err
	}
	l := Layout{Dir: dir}
	st := Status{Dir: dir}
	if st.Release, err = l.CurrentRelease(); err != nil {
		return st, m, err
	}
	if st.Release == "" {
		return st, m, fmt.Errorf("nothing is installed in %s", dir)
	}
	st.Previous, _ = l.PreviousRelease()
	if m, err = readManifest(l.Release(st.Release)); err != nil {
		return st, m, err
	}
	st.Bundle = m.Name
	st.Providers, st.Images, st.Templates = len(m.Components.Providers), len(m.Components.Images), len(m.Components.Templates)
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				st.DiskUsed += info.Size()
			}
		}
		return nil
	})
	if free, err := freeBytes(dir); err == nil {
		st.DiskFree = int64(free)
	}
	cfg, err := LoadConfig(dir, nil)
	if err != nil {
		return st, m, err
	}
	st.Role = cfg.Role
	// Each listener is probed on this host (loopback for a wildcard
	// address), its certificate verified as the name clients use.
	trust, _ := certs.Load(dir)
	if cfg.IsProxy() {
		// A proxy runs nothing else (proxy.go).
		st.Components = append(st.Components, proxyStatus(ctx, cfg, trust), egressComponent(l))
		return st, m, nil
	}
	probe := func(name, advertised, local, serverName string) Component {
		c := Component{Name: name, State: "down"}
		client := &http.Client{Timeout: 3 * time.Second}
		if trust != nil {
			client.Transport = localTransport(trust, serverName)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, local+"/healthz", nil)
		resp, err := client.Do(req)
		if err != nil {
			c.Detail = err.Error()
			return c
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			c.State, c.Detail = "ok", advertised
		} else {
			c.Detail = fmt.Sprintf("%s/healthz answered %s", advertised, resp.Status)
		}
		return c
	}
	registry := net.JoinHostPort(cfg.AdvertisedHost(cfg.MirrorAddress), portOf(cfg.MirrorAddress))
	st.Components = append(st.Components,
		probe("coderd", cfg.accessURL(), "https://"+loopbackAddr(cfg.TLSAddress), cfg.AccessHost()),
		withRestarts(l, probe("mirror", "https://"+registry, "https://"+loopbackAddr(cfg.MirrorAddress), cfg.AdvertisedHost(cfg.MirrorAddress))))
	st.OpenFiles = serverOpenFiles(cfg.TLSAddress)
	pg := Component{Name: "postgres", State: "down"}
	if cfg.PostgresURL != "" {
		pg.State, pg.Detail = "unknown", "external database"
	} else if _, err := os.Stat(filepath.Join(l.Postgres(), "postmaster.pid")); err == nil {
		pg.State, pg.Detail = "ok", "running from "+l.Postgres()
	}
	if m.Components.Postgres != nil {
		pg.Version = m.Components.Postgres.Version
	}
	st.Components = append(st.Components, withRestarts(l, pg), egressComponent(l))
	return st, m, nil
}

// serverOpenFiles reads the open file limit of the process listening on
// addr's port.
func serverOpenFiles(addr string) *OpenFileLimit {
	port, err := strconv.Atoi(portOf(addr))
	if err != nil {
		return &OpenFileLimit{Error: fmt.Sprintf("tls-address %q: %v", addr, err)}
	}
	pid, err := listenerPID(port)
	if err != nil {
		return &OpenFileLimit{Error: err.Error()}
	}
	lim, err := readOpenFileLimit(pid)
	if err != nil {
		return &OpenFileLimit{PID: pid, Error: err.Error()}
	}
	return &lim
}

// listenerPID finds the process that listens on TCP port: the listening
// sockets' inodes in /proc/net/tcp and tcp6, then the process holding one
// of them (root sees every process's descriptors, another user only their
// own processes').
func listenerPID(port int) (int, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue // no IPv6
		}
		for _, line := range strings.Split(string(b), "\n") {
			// sl local_address rem_address st … inode: "0100007F:1F90 … 0A …"
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" { // 0A is LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing listens on port %d: coderd is not running", port)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue // gone, or another user's
		}
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && inodes[target] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("the process listening on port %d is not readable by this user: run status as root", port)
}

// readOpenFileLimit reads a process's open file limit from
// /proc/PID/limits ("Max open files  SOFT  HARD  files").
func readOpenFileLimit(pid int) (OpenFileLimit, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return OpenFileLimit{}, fmt.Errorf("read the open file limit: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Max open files")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			break
		}
		soft, errSoft := parseLimit(f[0])
		hard, errHard := parseLimit(f[1])
		if errSoft != nil || errHard != nil {
			break
		}
		return openFileLimit(pid, soft, hard), nil
	}
	return OpenFileLimit{}, fmt.Errorf("read the open file limit: no \"Max open files\" line in /proc/%d/limits", pid)
}

// parseLimit reads a limit of /proc/PID/limits: a number or "unlimited".
func parseLimit(s string) (uint64, error) {
	if s == "unlimited" {
		return math.MaxUint64, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

// openFileLimit derives the agents a limit leaves room for, and the
// warning below LowAgentLimit.
func openFileLimit(pid int, soft, hard uint64) OpenFileLimit {
	l := OpenFileLimit{PID: pid, Soft: soft, Hard: hard, AgentsAtMost: soft / fdsPerAgent}
	if l.AgentsAtMost < LowAgentLimit {
		l.Warning = fmt.Sprintf("the open file limit (%d) leaves room for about %d agents (%d sockets each), fewer than %d: raise it (LimitNOFILE= in the systemd unit, ulimit -n and -Hn)",
			soft, l.AgentsAtMost, fdsPerAgent, LowAgentLimit)
	}
	return l
}
