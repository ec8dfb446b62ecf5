package builder

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/crane"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	ocilayout "github.com/google/go-containerregistry/pkg/v1/layout"

	"airgapcoder/internal/upstreamtest"
)

// BenchmarkBuildImages compares `bundle build` of the test image set (two
// images, two platforms each, 4 MiB layers, some shared) with what crane
// does for the same images in-process: crane.Pull of each platform and a
// write into one OCI layout. Both start cold; the bundle build also checks
// digests, fills its cache and writes and signs the bundle. Reported:
// bundle/crane (cold cache), warm/crane (the same build again with the
// cache filled) and the milliseconds of each.
func BenchmarkBuildImages(b *testing.B) {
	up := upstreamtest.New(b, upstreamtest.Options{LayerSize: 4 << 20})
	dir := b.TempDir()
	yaml := "version: 1\nname: bench\nrelease: \"1\"\nplatforms: [linux/amd64, linux/arm64]\n" +
		"images:\n  - docker.io/library/testbase:1\n  - images.test/team/tool:2\n" +
		"certs: [" + up.CAFile + "]\n" +
		"registries:\n  docker.io: " + up.URL + "\n  images.test: " + up.URL + "\n"
	if err := os.WriteFile(filepath.Join(dir, "bundle.yaml"), []byte(yaml), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg, err := LoadConfig(filepath.Join(dir, "bundle.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	build := func(cache string) time.Duration {
		start := time.Now()
		_, err := Build(context.Background(), Options{Config: cfg, OutputDir: b.TempDir(), Key: key, CacheDir: cache, Environ: []string{}})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	pull := func() time.Duration {
		start := time.Now()
		lp, err := ocilayout.Write(b.TempDir(), empty.Index)
		if err != nil {
			b.Fatal(err)
		}
		for _, img := range up.Images {
			// The upstream's transport sends every host to it.
			ref := strings.Replace(img.Ref, "docker.io/", "images.test/", 1)
			for _, plat := range []string{"linux/amd64", "linux/arm64"} {
				p, _ := v1.ParsePlatform(plat)
				im, err := crane.Pull(ref, crane.WithTransport(up.Transport()), crane.WithPlatform(p))
				if err != nil {
					b.Fatal(err)
				}
				if err := lp.AppendImage(im); err != nil {
					b.Fatal(err)
				}
			}
		}
		return time.Since(start)
	}
	var cold, warm, craneTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cache := b.TempDir()
		cold += build(cache)
		warm += build(cache)
		craneTime += pull()
	}
	b.ReportMetric(float64(cold)/float64(craneTime), "bundle/crane")
	b.ReportMetric(float64(warm)/float64(craneTime), "warm/crane")
	b.ReportMetric(float64(cold.Milliseconds())/float64(b.N), "bundle-ms")
	b.ReportMetric(float64(warm.Milliseconds())/float64(b.N), "warm-ms")
	b.ReportMetric(float64(craneTime.Milliseconds())/float64(b.N), "crane-ms")
}
