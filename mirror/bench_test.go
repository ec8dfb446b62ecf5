package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// BenchmarkTerraformInit compares `terraform init` of a template that needs
// our provider from the mirror's network mirror (HTTPS, trusting the
// appliance CA through SSL_CERT_FILE) with the same from a filesystem_mirror
// of the same provider tree. Each iteration runs both, in a fresh folder.
//
//	go test ./mirror/ -run '^$' -bench TerraformInit -benchtime 10x
func BenchmarkTerraformInit(b *testing.B) {
	tfBin := terraformFor(b)
	dir := b.TempDir()
	providers := filepath.Join(dir, ProvidersDir)
	addOurProvider(b, providers)
	m := startMirror(b, dir)
	network := networkMirrorConfig(b, "https://"+m.addr+ProvidersPath)
	filesystem := filesystemMirrorConfig(b, providers)

	var netTime, fsTime time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, stderr, err := terraformInit(b, tfBin, network, m.store.Env()); err != nil {
			b.Fatalf("network mirror: %v\n%s", err, stderr)
		}
		netTime += time.Since(start)
		start = time.Now()
		if _, stderr, err := terraformInit(b, tfBin, filesystem, nil); err != nil {
			b.Fatalf("filesystem mirror: %v\n%s", err, stderr)
		}
		fsTime += time.Since(start)
	}
	b.ReportMetric(float64(netTime.Milliseconds())/float64(b.N), "network-ms/init")
	b.ReportMetric(float64(fsTime.Milliseconds())/float64(b.N), "filesystem-ms/init")
	b.ReportMetric(float64(netTime)/float64(fsTime), "network/filesystem")
}

// BenchmarkImagePull compares pulling every blob of a two-platform image
// (16 MiB layers, one shared) from the mirror's registry over HTTPS with
// go-containerregistry (crane's library; it checks each blob's digest as it
// reads) with reading the same blobs straight from the OCI layout on disk
// and hashing them. Both sides read and hash the same bytes.
//
//	go test ./mirror/ -run '^$' -bench ImagePull -benchtime 20x
func BenchmarkImagePull(b *testing.B) {
	dir := b.TempDir()
	images := writeTestLayout(b, filepath.Join(dir, ImagesDir), 16<<20)
	m := startMirror(b, dir)
	ref, err := name.ParseReference(m.addr + "/" + images[0].repo + ":" + images[0].tag)
	if err != nil {
		b.Fatal(err)
	}
	transport := m.store.Transport()
	lp, err := layout.FromPath(filepath.Join(dir, ImagesDir))
	if err != nil {
		b.Fatal(err)
	}

	var bytesRead int64
	var regTime, diskTime time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		idx, err := remote.Index(ref, remote.WithTransport(transport))
		if err != nil {
			b.Fatal(err)
		}
		n, err := readAllBlobs(idx, false)
		if err != nil {
			b.Fatal(err)
		}
		regTime += time.Since(start)

		start = time.Now()
		root, err := lp.ImageIndex()
		if err != nil {
			b.Fatal(err)
		}
		idx, err = root.ImageIndex(images[0].digest)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := readAllBlobs(idx, true); err != nil {
			b.Fatal(err)
		}
		diskTime += time.Since(start)
		bytesRead += n
	}
	mb := float64(bytesRead) / (1 << 20)
	b.ReportMetric(mb/regTime.Seconds(), "registry-MiB/s")
	b.ReportMetric(mb/diskTime.Seconds(), "disk-MiB/s")
	b.ReportMetric(float64(regTime)/float64(diskTime), "registry/disk")
}

// readAllBlobs reads the config and layers of every platform of idx and
// returns the bytes read; with verify it hashes them and compares with
// their digests (remote blobs are verified by go-containerregistry itself).
func readAllBlobs(idx v1.ImageIndex, verify bool) (int64, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return total, err
		}
		if _, err := img.RawConfigFile(); err != nil {
			return total, err
		}
		layers, err := img.Layers()
		if err != nil {
			return total, err
		}
		for _, l := range layers {
			rc, err := l.Compressed()
			if err != nil {
				return total, err
			}
			h := sha256.New()
			var w io.Writer = io.Discard
			if verify {
				w = h
			}
			n, err := io.Copy(w, rc)
			rc.Close()
			if err != nil {
				return total, err
			}
			total += n
			if verify {
				want, _ := l.Digest()
				if got := hex.EncodeToString(h.Sum(nil)); got != want.Hex {
					return total, fmt.Errorf("layer %s: content hashes to %s", want, got)
				}
			}
		}
	}
	return total, nil
}
