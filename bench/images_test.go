package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/internal/coderprovider"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/upstreamtest"
)

// The image paths users take, with the built coder and skopeo (Debian's),
// side by side with skopeo doing the obvious alternative:
//
//	go test ./bench/ -run '^$' -bench 'BundleBuildImages|MirrorPull' -benchtime 3x
//
// The test upstream holds two images × two platforms with 16 MiB layers
// (some shared), over HTTPS on loopback.

// imageBench is the upstream and what skopeo needs to trust it.
type imageBench struct {
	coder string
	up    *upstreamtest.Upstream
	certd string // a --src-cert-dir holding the upstream's CA
}

func newImageBench(b *testing.B) *imageBench {
	b.Helper()
	if _, err := exec.LookPath("skopeo"); err != nil {
		b.Fatal("skopeo is not installed (scripts/install-deps.sh installs it)")
	}
	ib := &imageBench{coder: testbin.Coder(b), up: upstreamtest.New(b, upstreamtest.Options{LayerSize: 16 << 20}), certd: b.TempDir()}
	if err := os.WriteFile(filepath.Join(ib.certd, "ca.crt"), ib.up.CAPEM, 0o644); err != nil {
		b.Fatal(err)
	}
	return ib
}

// settleDisk writes every dirty page to disk, untimed, before a timed
// command: otherwise the command pays for the writeback of what the one
// before it wrote (crane and skopeo leave their output in the page cache,
// and the kernel flushes it during whatever runs next).
func settleDisk() { syscall.Sync() }

// skopeoCopy runs skopeo copy --all src dst and returns how long it took.
func skopeoCopy(b *testing.B, args ...string) time.Duration {
	b.Helper()
	settleDisk()
	start := time.Now()
	out, err := exec.Command("skopeo", append([]string{"copy", "--quiet", "--all"}, args...)...).CombinedOutput()
	if err != nil {
		b.Fatalf("skopeo copy %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return time.Since(start)
}

// bundleYAML is a bundle of the upstream's images only.
func (ib *imageBench) bundleYAML(b *testing.B) string {
	b.Helper()
	var images strings.Builder
	for _, img := range ib.up.Images {
		fmt.Fprintf(&images, "  - %s\n", img.Ref)
	}
	p := filepath.Join(b.TempDir(), "bundle.yaml")
	yaml := "version: 1\nname: images\nrelease: \"1\"\nplatforms: [linux/amd64, linux/arm64]\nimages:\n" + images.String() +
		"certs: [" + ib.up.CAFile + "]\nregistries:\n  docker.io: " + ib.up.URL + "\n  images.test: " + ib.up.URL + "\n"
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}

// buildBundle runs the built coder bundle build with a cold cache and
// returns how long it took and the bundle.
func (ib *imageBench) buildBundle(b *testing.B, yaml string) (time.Duration, string) {
	b.Helper()
	out := b.TempDir()
	cmd := exec.Command(ib.coder, "bundle", "build", "-f", yaml, "--output", out, "--cache-dir", b.TempDir())
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1000000000")
	settleDisk()
	start := time.Now()
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("coder bundle build: %v\n%s", err, o)
	}
	return time.Since(start), filepath.Join(out, "images-1.bundle")
}

// BenchmarkBundleBuildImages: `coder bundle build` of the images with a
// cold cache (fetch, verify, signatures and SBOMs looked up, pack into a
// signed bundle) against `crane pull --format oci` of the same images, all
// platforms, from the same registry into an OCI layout (crane built from
// the module tools/go.mod pins), and against `skopeo copy --all` of each.
//
// The build fsyncs the bundle before it renames it into place (a bundle
// reported written is on the disk, ready to be carried away); crane and
// skopeo leave their output to the kernel's writeback. So the benchmark
// also times crane followed by sync(1): both until the bytes are on disk.
func BenchmarkBundleBuildImages(b *testing.B) {
	ib := newImageBench(b)
	yaml := ib.bundleYAML(b)
	crane := craneBinary(b)
	host := strings.TrimPrefix(ib.up.URL, "https://")
	var build, craneTime, craneSynced, skopeo time.Duration
	for b.Loop() {
		d, bundleFile := ib.buildBundle(b, yaml)
		build += d
		os.RemoveAll(filepath.Dir(bundleFile)) // keep the disk's load the same from run to run
		args := []string{"pull", "--format", "oci"}
		for _, img := range ib.up.Images {
			args = append(args, host+"/"+img.Repository+":"+img.Tag)
		}
		layout := filepath.Join(b.TempDir(), "layout")
		cmd := exec.Command(crane, append(args, layout)...)
		cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+ib.up.CAFile)
		settleDisk()
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("crane %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		craneTime += time.Since(start)
		settleDisk()
		craneSynced += time.Since(start)
		os.RemoveAll(layout)
		layout = filepath.Join(b.TempDir(), "layout")
		for _, img := range ib.up.Images {
			skopeo += skopeoCopy(b, "--src-cert-dir", ib.certd, "docker://"+host+"/"+img.Repository+":"+img.Tag, "oci:"+layout+":"+img.Ref)
		}
		os.RemoveAll(layout)
	}
	b.ReportMetric(float64(build.Milliseconds())/float64(b.N), "bundle-ms")
	b.ReportMetric(float64(craneTime.Milliseconds())/float64(b.N), "crane-ms")
	b.ReportMetric(float64(craneSynced.Milliseconds())/float64(b.N), "crane+sync-ms")
	b.ReportMetric(float64(skopeo.Milliseconds())/float64(b.N), "skopeo-ms")
	b.ReportMetric(build.Seconds()/craneTime.Seconds(), "bundle/crane")
	b.ReportMetric(build.Seconds()/craneSynced.Seconds(), "bundle/crane+sync")
	b.ReportMetric(build.Seconds()/skopeo.Seconds(), "bundle/skopeo")
}

// craneBinary builds crane from the tools module (tools/go.mod pins it;
// make deps downloads it) and returns its path.
func craneBinary(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "crane")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/google/go-containerregistry/cmd/crane")
	cmd.Dir = coderprovider.ToolsDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build crane from tools/go.mod: %v\n%s", err, out)
	}
	return bin
}

// BenchmarkMirrorPull: skopeo pulls every image from the built `coder
// mirror serve` (HTTPS, the appliance CA) over an unpacked bundle, against
// skopeo copying the same images from the bundle's OCI layout on disk,
// both into a fresh folder.
func BenchmarkMirrorPull(b *testing.B) {
	ib := newImageBench(b)
	_, bundleFile := ib.buildBundle(b, ib.bundleYAML(b))
	dir := filepath.Join(b.TempDir(), "release")
	if o, err := exec.Command(ib.coder, "bundle", "extract", bundleFile, "--dir", dir, "--allow-unsigned").CombinedOutput(); err != nil {
		b.Fatalf("coder bundle extract: %v\n%s", err, o)
	}
	addr := testport.Addr(b)
	serve := exec.Command(ib.coder, "mirror", "serve", "--dir", dir, "--address", addr)
	stderr, err := serve.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "Mirror serving") {
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	certd := b.TempDir()
	ca, err := os.ReadFile(filepath.Join(dir, "certs", "ca.pem"))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certd, "ca.crt"), ca, 0o644); err != nil {
		b.Fatal(err)
	}
	var mirror, disk time.Duration
	for b.Loop() {
		for _, img := range ib.up.Images {
			mirror += skopeoCopy(b, "--src-cert-dir", certd, "docker://"+addr+"/"+img.Ref, "dir:"+b.TempDir())
			disk += skopeoCopy(b, "oci:"+filepath.Join(dir, "images")+":"+img.Ref, "dir:"+b.TempDir())
		}
	}
	b.ReportMetric(float64(mirror.Milliseconds())/float64(b.N), "mirror-ms")
	b.ReportMetric(float64(disk.Milliseconds())/float64(b.N), "disk-ms")
	b.ReportMetric(mirror.Seconds()/disk.Seconds(), "mirror/disk")
}
