package appliance

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"airgapcoder/certs"
	"airgapcoder/internal/atomicfile"
)

// Layout names the folders of an appliance DIR.
type Layout struct{ Dir string }

func (l Layout) Releases() string           { return filepath.Join(l.Dir, "releases") }
func (l Layout) Release(name string) string { return filepath.Join(l.Dir, "releases", name) }
func (l Layout) Current() string            { return filepath.Join(l.Dir, "current") }
func (l Layout) Previous() string           { return filepath.Join(l.Dir, "previous") }
func (l Layout) Data() string               { return filepath.Join(l.Dir, "data") }
func (l Layout) Postgres() string           { return filepath.Join(l.Dir, "data", "postgres") }
func (l Layout) Certs() string              { return certs.CertsDir(l.Dir) } // package certs' folder
func (l Layout) Run() string                { return filepath.Join(l.Dir, "run") }
func (l Layout) Cache() string              { return filepath.Join(l.Dir, "cache") }
func (l Layout) Staging() string            { return filepath.Join(l.Dir, "staging") }
func (l Layout) Backups() string            { return filepath.Join(l.Dir, "backups") }

// CurrentRelease returns the release the current link points at ("" when
// nothing is installed).
func (l Layout) CurrentRelease() (string, error) { return l.linkTarget(l.Current()) }

// PreviousRelease returns the release before the current one ("" if none).
func (l Layout) PreviousRelease() (string, error) { return l.linkTarget(l.Previous()) }

func (l Layout) linkTarget(link string) (string, error) {
	target, err := os.Readlink(link)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", link, err)
	}
	return filepath.Base(target), nil
}

// switchLink points link at releases/<release> atomically: a new symlink
// beside it, renamed over the old one.
func (l Layout) switchLink(link, release string) error {
	tmp := link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Join("releases", release), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		return err
	}
	return atomicfile.SyncDir(l.Dir)
}

// Activate makes release current and remembers the old current as
// previous.
func (l Layout) Activate(release string) error {
	old, err := l.CurrentRelease()
	if err != nil {
		return err
	}
	if old != "" && old != release {
		if err := l.switchLink(l.Previous(), old); err != nil {
			return fmt.Errorf("remember previous release %s: %w", old, err)
		}
	}
	if err := l.switchLink(l.Current(), release); err != nil {
		return fmt.Errorf("switch to release %s: %w", release, err)
	}
	return nil
}

// serviceAccount is the unprivileged user PostgreSQL runs as.
type serviceAccount struct {
	Name     string
	UID, GID int
}

// ensureServiceUser returns the service user, creating it (a system user
// with no login shell) when running as root and it does not exist.
func ensureServiceUser(name string) (serviceAccount, error) {
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if !errors.As(err, &unknown) {
			return serviceAccount{}, err
		}
		if os.Geteuid() != 0 {
			return serviceAccount{}, fmt.Errorf("service user %q does not exist; create it or run install as root", name)
		}
		out, cerr := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", name).CombinedOutput()
		if cerr != nil {
			return serviceAccount{}, fmt.Errorf("create service user %s: %v: %s", name, cerr, strings.TrimSpace(string(out)))
		}
		if u, err = user.Lookup(name); err != nil {
			return serviceAccount{}, err
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return serviceAccount{Name: name, UID: uid, GID: gid}, nil
}

// freeBytes is the free space of the filesystem holding path.
func freeBytes(path string) (uint64, error) {
	var st syscall.Statfs_t
	for p := path; ; p = filepath.Dir(p) {
		if err := syscall.Statfs(p, &st); err == nil {
			return st.Bavail * uint64(st.Bsize), nil
		} else if p == filepath.Dir(p) {
			return 0, err
		}
	}
}

// Unit files install writes beside the appliance, to link into systemd.
const (
	UnitFile         = "coder-appliance.service"
	LauncherUnitFile = "coder-appliance-launcher.service"
)

// systemdUnit is the appliance's unit. binary is normally the current
// release's own coder (through the current link), so the service runs what
// upgrade and rollback switched to. It runs as the service user, never
// root, beside the launcher's unit, which it needs. It is a Type=notify
// service: systemd counts it started when `appliance up` says READY=1, once
// every part serves (a first boot's initdb takes a while, hence the start
// timeout).
func systemdUnit(binary, dir, user string) string {
	return fmt.Sprintf(`[Unit]
Description=Coder appliance (offline remote development)
After=network.target %[4]s
Requires=%[4]s

[Service]
Type=notify
NotifyAccess=main
User=%[3]s
Group=%[3]s
ExecStart=%[1]s appliance up --dir %[2]s
TimeoutStartSec=300
# Fed (WATCHDOG=1) only while /healthz passes: a wedged or broken
# appliance is killed and started again.
WatchdogSec=30
Restart=on-failure
KillSignal=SIGTERM
TimeoutStopSec=90
LimitNOFILE=65536
# No NoNewPrivileges=: rootless podman runs the setuid newuidmap.

[Install]
WantedBy=multi-user.target
`, systemdQuote(binary), systemdQuote(dir), user, LauncherUnitFile)
}

// launcherUnit is the workspace launcher's unit: the one part of the
// appliance that keeps root, to start each workspace as its owner's own
// account (package launcher).
func launcherUnit(binary, dir string) string {
	return fmt.Sprintf(`[Unit]
Description=Coder appliance workspace launcher (starts workspaces as their owners' accounts)
PartOf=%[3]s

[Service]
Type=simple
ExecStart=%[1]s appliance launcher --dir %[2]s
Restart=on-failure
KillMode=process

[Install]
WantedBy=multi-user.target
`, systemdQuote(binary), systemdQuote(dir), UnitFile)
}

// systemdQuote makes s one word of a unit's command line: quoted when it
// holds spaces or quotes, with systemd's specifiers (%) and variables ($)
// escaped.
func systemdQuote(s string) string {
	s = strings.NewReplacer("%", "%%", "$", "$$").Replace(s)
	if !strings.ContainsAny(s, " \t\"'\\") {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
