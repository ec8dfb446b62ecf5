package appliance

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"airgapcoder/bundle"
	"airgapcoder/certs"
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
}

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
