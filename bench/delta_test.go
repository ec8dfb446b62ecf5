package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/bundle"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testport"
)

// BenchmarkApplianceDeltaInstall: release B changes only the coder binary
// of an appliance bundle (coder, terraform, PostgreSQL). With the built
// coder, each iteration installs A into two fresh appliance folders, then
// times `coder appliance install` of B's full bundle into one and of B's
// delta bundle (built --against the other's inventory) into the other.
// Reported: delta/full install time (issue 17's goal: ≤ 1.0) and the
// delta's size against the new binary compressed (goal ≤ 1.1).
//
//	go test ./bench/ -run '^$' -bench ApplianceDeltaInstall -benchtime 3x
func BenchmarkApplianceDeltaInstall(b *testing.B) {
	coder := testbin.Coder(b)
	work := b.TempDir()
	run := func(args ...string) string {
		b.Helper()
		out, err := exec.Command(coder, args...).CombinedOutput()
		if err != nil {
			b.Fatalf("coder %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	keys := filepath.Join(work, "keys")
	run("bundle", "keygen", "--output", keys)
	pub := filepath.Join(keys, "bundle.pub")
	self, err := os.ReadFile(coder)
	if err != nil {
		b.Fatal(err)
	}
	build := func(release string, against ...string) string {
		b.Helper()
		bin := filepath.Join(work, "coder-"+release)
		if err := os.WriteFile(bin, append(self, "\nrelease "+release+"\n"...), 0o755); err != nil {
			b.Fatal(err)
		}
		yml := filepath.Join(work, "bundle-"+release+".yaml")
		cfg := fmt.Sprintf("version: 1\nname: bench\nrelease: %s\nplatforms: [linux/amd64]\ncoder: {path: %s}\n"+
			"terraform: {version: 1.11.4, path: /usr/local/bin/terraform}\npostgres: {path: /usr/lib/postgresql/15}\n", release, bin)
		if err := os.WriteFile(yml, []byte(cfg), 0o644); err != nil {
			b.Fatal(err)
		}
		out := filepath.Join(work, "out-"+release+strings.Repeat("-delta", len(against)))
		args := []string{"bundle", "build", "-f", yml, "--output", out, "--sign-key", filepath.Join(keys, "bundle.key"), "--cache-dir", filepath.Join(work, "cache")}
		name := bundle.FileName("bench", release)
		for _, inv := range against {
			args = append(args, "--against", inv)
			name = bundle.DeltaFileName("bench", release, "1.0.0")
		}
		run(args...)
		return filepath.Join(out, name)
	}
	newAppliance := func() string {
		b.Helper()
		dir := filepath.Join(b.TempDir(), "appliance")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		cfg := fmt.Sprintf("tls-address: %s\nhttp-address: %s\nmirror-address: %s\n", testport.Addr(b), testport.Addr(b), testport.Addr(b))
		if err := os.WriteFile(filepath.Join(dir, "appliance.yaml"), []byte(cfg), 0o644); err != nil {
			b.Fatal(err)
		}
		return dir
	}
	a := build("1.0.0")
	base := newAppliance()
	run("appliance", "install", a, "--dir", base, "--public-key", pub)
	inv := filepath.Join(work, "inventory.json")
	run("appliance", "inventory", "--dir", base, "-o", inv)
	full := build("1.0.1")
	delta := build("1.0.1", inv)

	var fullTime, deltaTime time.Duration
	for b.Loop() {
		d1, d2 := newAppliance(), newAppliance()
		run("appliance", "install", a, "--dir", d1, "--public-key", pub)
		run("appliance", "install", a, "--dir", d2, "--public-key", pub)
		start := time.Now()
		run("appliance", "install", full, "--dir", d1, "--public-key", pub)
		fullTime += time.Since(start)
		start = time.Now()
		run("appliance", "install", delta, "--dir", d2, "--public-key", pub)
		deltaTime += time.Since(start)
	}
	m, info, err := bundle.Inspect(delta)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range m.Files {
		if f.Path == bundle.CoderPath("linux/amd64") {
			b.ReportMetric(float64(info.TotalSize)/float64(f.StoredSize), "delta/binary")
		}
	}
	_, fullInfo, err := bundle.Inspect(full)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(fullInfo.TotalSize)/(1<<20), "full-MiB")
	b.ReportMetric(float64(info.TotalSize)/(1<<20), "delta-MiB")
	b.ReportMetric(fullTime.Seconds()*1000/float64(b.N), "full-install-ms")
	b.ReportMetric(deltaTime.Seconds()*1000/float64(b.N), "delta-install-ms")
	b.ReportMetric(deltaTime.Seconds()/fullTime.Seconds(), "delta/full")
}
