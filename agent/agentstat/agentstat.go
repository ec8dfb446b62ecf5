// Package agentstat measures what `coder stat` reports inside a workspace,
// for the metadata scripts of Coder's templates: CPU cores and memory in use
// against what is available — the container's cgroup (v1 or v2) limits when
// the workspace runs in a container, or the host's (/proc/stat,
// /proc/meminfo) — and a filesystem's used and total space. It only reads
// /proc, /sys/fs/cgroup and statfs(2); it works on Linux and answers
// ErrUnsupported elsewhere. It imports only the standard library and the
// project's clock (coder/quartz), which a CPU sample waits on.
package agentstat

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/coder/quartz"
)

// ErrUnsupported is returned on operating systems other than Linux.
var ErrUnsupported = errors.New("agentstat: coder stat works on Linux only (this is " + runtime.GOOS + ")")

// Prefix scales the numbers of a Result when printed.
type Prefix float64

// The binary prefixes of --prefix; PrefixNone prints plain numbers.
const (
	PrefixNone Prefix = 1
	PrefixKibi Prefix = 1 << 10
	PrefixMebi Prefix = 1 << 20
	PrefixGibi Prefix = 1 << 30
	PrefixTebi Prefix = 1 << 40
)

// ParsePrefix reads Ki, Mi, Gi or Ti.
func ParsePrefix(s string) (Prefix, error) {
	switch s {
	case "Ki":
		return PrefixKibi, nil
	case "Mi":
		return PrefixMebi, nil
	case "Gi":
		return PrefixGibi, nil
	case "Ti":
		return PrefixTebi, nil
	}
	return 0, fmt.Errorf("agentstat: unknown prefix %q: use Ki, Mi, Gi or Ti", s)
}

func (p Prefix) String() string {
	switch p {
	case PrefixKibi:
		return "Ki"
	case PrefixMebi:
		return "Mi"
	case PrefixGibi:
		return "Gi"
	case PrefixTebi:
		return "Ti"
	}
	return ""
}

// Result is one measurement: Used out of Total, in Unit ("cores" or "B").
type Result struct {
	// Used is how much is in use, in Unit (unscaled).
	Used float64 `json:"used"`
	// Total is how much is available, in Unit (unscaled); nil when there
	// is no bound.
	Total *float64 `json:"total"`
	// Unit is "cores" for CPU and "B" (bytes) for memory and disk.
	Unit string `json:"unit"`
	// Prefix scales the numbers when printed (the zero value prints them
	// as they are); JSON carries unscaled numbers.
	Prefix Prefix `json:"-"`
}

// String prints r as Coder does: "0.5/2 cores (25%)", "1.2/7.7 GiB (16%)".
func (r Result) String() string {
	scale := float64(r.Prefix)
	if scale == 0 {
		scale = 1
	}
	var b strings.Builder
	b.WriteString(humanize(r.Used / scale))
	if r.Total != nil {
		b.WriteString("/" + humanize(*r.Total/scale))
	}
	b.WriteString(" " + r.Prefix.String() + r.Unit)
	if r.Total != nil && *r.Total > 0 {
		fmt.Fprintf(&b, " (%s%%)", strconv.FormatFloat(r.Used / *r.Total * 100, 'f', 0, 64))
	}
	return strings.TrimSpace(b.String())
}

// humanize prints f with at most three significant digits after rounding,
// as Coder does.
func humanize(f float64) string {
	prec := 0
	switch a := math.Abs(f); {
	case a == 0:
	case a < 1:
		prec = 3
	case a < 10:
		prec = 2
	case a < 100:
		prec = 1
	}
	r := math.Pow(10, float64(prec))
	return strconv.FormatFloat(math.Round(f*r)/r, 'f', -1, 64)
}

// Statter measures CPU and memory. The zero value is not usable: construct
// it with New (or fill every field, as tests do).
type Statter struct {
	// FS is the root filesystem: /proc and /sys are read from it, by paths
	// without the leading slash ("proc/stat").
	FS fs.FS
	// SampleInterval is how long CPU use is measured over.
	SampleInterval time.Duration
	// Clock times the CPU samples (a timer tagged "agentstat" and
	// "sample"); nil means the real clock. Tests pass a quartz.Mock.
	Clock quartz.Clock
	// NumCPU counts the CPUs this process may run on (runtime.NumCPU): a
	// container's cores when its cgroup sets no CPU quota.
	NumCPU func() int
}

// New returns a Statter of this machine, sampling CPU use over 250ms.
func New() (*Statter, error) {
	fsys, err := rootFS()
	if err != nil {
		return nil, err
	}
	return &Statter{FS: fsys, SampleInterval: 250 * time.Millisecond, NumCPU: runtime.NumCPU, Clock: quartz.NewReal()}, nil
}

// clock is s.Clock, or the real clock.
func (s *Statter) clock() quartz.Clock {
	if s.Clock == nil {
		return quartz.NewReal()
	}
	return s.Clock
}

func float(f float64) *float64 { return &f }

// readFile reads a file of s.FS as trimmed text.
func (s *Statter) readFile(name string) (string, error) {
	b, err := fs.ReadFile(s.FS, name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// readInt reads a file holding one integer.
func (s *Statter) readInt(name string) (int64, error) {
	t, err := s.readFile(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("agentstat: read %s: %w", name, err)
	}
	return n, nil
}

// readKeyed reads "key value" lines (memory.stat, cpu.stat) into a map.
func (s *Statter) readKeyed(name string) (map[string]int64, error) {
	t, err := s.readFile(name)
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for _, line := range strings.Split(t, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			m[f[0]] = n
		}
	}
	return m, nil
}
