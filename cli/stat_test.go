package cli_test

import (
	"encoding/json"
	"math"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// statJSON is what `coder stat cpu|mem|disk -o json` prints.
type statJSON struct {
	Used  float64  `json:"used"`
	Total *float64 `json:"total"`
	Unit  string   `json:"unit"`
}

func runStatJSON(t *testing.T, args ...string) statJSON {
	t.Helper()
	out := mustRun(t, nil, append([]string{"stat"}, append(args, "-o", "json")...)...)
	var r statJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Total == nil {
		t.Fatalf("coder stat %s -o json: %q: %v", strings.Join(args, " "), out, err)
	}
	return r
}

// toolFields runs a tool and returns the fields of its output's line n.
func toolFields(t *testing.T, n int, name string, args ...string) []float64 {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var nums []float64
	for _, f := range strings.Fields(lines[n]) {
		if v, err := strconv.ParseFloat(f, 64); err == nil {
			nums = append(nums, v)
		}
	}
	return nums
}

// TestStat checks what Coder's metadata scripts call against df, free and
// getconf on this machine.
func TestStat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	t.Run("disk", func(t *testing.T) {
		r := runStatJSON(t, "disk", "--path", dir)
		df := toolFields(t, 1, "df", "-B1", "--output=size,used", dir)
		if r.Unit != "B" || *r.Total != df[0] || math.Abs(r.Used-df[1]) > df[0]/100 {
			t.Errorf("coder stat disk: %v of %v %s; df: %v of %v B", r.Used, *r.Total, r.Unit, df[1], df[0])
		}
		text := mustRun(t, nil, "stat", "disk", "--path", dir)
		if !regexp.MustCompile(`^[0-9.]+/[0-9.]+ GiB \([0-9]+%\)\n$`).MatchString(text) {
			t.Errorf("coder stat disk: %q, want like 12/98 GiB (12%%)", text)
		}
		text = mustRun(t, nil, "stat", "disk", "--path", dir, "--prefix", "Mi")
		if !strings.HasSuffix(strings.Fields(text)[1], "MiB") {
			t.Errorf("coder stat disk --prefix Mi: %q", text)
		}
	})

	t.Run("mem --host", func(t *testing.T) {
		r := runStatJSON(t, "mem", "--host")
		free := toolFields(t, 1, "free", "-b") // Mem: total used free shared buff/cache available
		if r.Unit != "B" || *r.Total != free[0] || math.Abs(r.Used-free[1]) > free[0]*0.03 {
			t.Errorf("coder stat mem --host: %v of %v %s; free: %v of %v B", r.Used, *r.Total, r.Unit, free[1], free[0])
		}
		// The container's view (or the host's outside one) is no larger.
		c := runStatJSON(t, "mem")
		if c.Used <= 0 || *c.Total > free[0] {
			t.Errorf("coder stat mem: %v of %v bytes", c.Used, *c.Total)
		}
	})

	t.Run("cpu", func(t *testing.T) {
		online := toolFields(t, 0, "getconf", "_NPROCESSORS_ONLN")[0]
		r := runStatJSON(t, "cpu", "--host")
		if r.Unit != "cores" || *r.Total != online || r.Used < 0 || r.Used > online+0.01 {
			t.Errorf("coder stat cpu --host: %v of %v %s, want up to %v cores", r.Used, *r.Total, r.Unit, online)
		}
		text := mustRun(t, nil, "stat", "cpu")
		if !regexp.MustCompile(`^[0-9.]+/[0-9.]+ cores \([0-9]+%\)\n$`).MatchString(text) {
			t.Errorf("coder stat cpu: %q, want like 0.5/2 cores (25%%)", text)
		}
	})

	t.Run("all", func(t *testing.T) {
		out := mustRun(t, nil, "stat")
		if !strings.HasPrefix(out, "HOST CPU") || !strings.Contains(out, "HOME DISK") || !strings.Contains(out, "GiB") {
			t.Errorf("coder stat: %q", out)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			args     []string
			code     int
			inStderr string
		}{
			{[]string{"stat", "mem", "--prefix", "Xi"}, 2, `unknown --prefix "Xi"`},
			{[]string{"stat", "cpu", "-o", "yaml"}, 2, `unknown --output "yaml"`},
			{[]string{"stat", "disk", "--nope"}, 2, "--nope"},
			{[]string{"stat", "disk", "--path", dir + "/missing"}, 1, "no such file or directory"},
		} {
			_, stderr, code := run(t, nil, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.inStderr) {
				t.Errorf("coder %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.inStderr)
			}
		}
	})
}
