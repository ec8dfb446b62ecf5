package builder

import (
	"os"
	"strings"
	"testing"

	"airgapcoder/internal/upstreamtest"
)

// TestBuildLayerFailsWhileWriting: the layers download while the bundle is
// written; when the last one in the stream fails for good, the build fails
// naming it, and no bundle (nor any temporary file) is left.
func TestBuildLayerFailsWhileWriting(t *testing.T) {
	e := newBuildEnv(t, upstreamtest.Options{LayerSize: 1 << 20})
	layers, err := e.up.Layers()
	if err != nil {
		t.Fatal(err)
	}
	last := ""
	for h := range layers {
		last = max(last, h.String())
	}
	for _, img := range e.up.Images {
		e.up.FailNext("/v2/"+img.Repository+"/blobs/"+last, 1000)
	}
	cfg := e.config(t, []string{"linux/amd64", "linux/arm64"}, imagesBody())
	out := t.TempDir()
	_, err = e.build(t, cfg, out, e.cache)
	if err == nil || !strings.Contains(err.Error(), "blob "+last+": ") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("build with a layer the registry never serves: got %v, want an error naming blob %s and the 503", err, last)
	}
	t.Logf("the error: %v", err)
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("a failed build left %d files in the output folder, such as %s", len(entries), entries[0].Name())
	}
}

// TestBuildDeltaSkipsInstalledLayers: a delta build, even with a cold
// cache, does not download the image layers the release it is built against
// has (the delta leaves them out); it still fetches what it checks the
// images by (manifests, configs).
func TestBuildDeltaSkipsInstalledLayers(t *testing.T) {
	e := newBuildEnv(t, upstreamtest.Options{})
	cfg := e.config(t, []string{"linux/amd64", "linux/arm64"}, imagesBody())
	base, err := e.build(t, cfg, t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	all, err := e.up.Layers()
	if err != nil {
		t.Fatal(err)
	}
	layers := map[string]bool{}
	for h := range all {
		layers[h.String()] = true
	}
	e.up.ResetCounts()
	delta, err := e.build(t, cfg, t.TempDir(), t.TempDir(), func(o *Options) { o.Against = base.Manifest })
	if err != nil {
		t.Fatal(err)
	}
	fetched := 0
	for path, n := range e.up.BlobGets() {
		_, digest, _ := strings.Cut(path, "/blobs/")
		if layers[digest] {
			t.Errorf("the delta build fetched layer %s (%d times), which the base release has", digest, n)
		}
		fetched += n
	}
	if fetched == 0 {
		t.Error("the delta build fetched no blob at all: want the configs, which it checks the images by")
	}
	omitted := map[string]bool{}
	for _, o := range delta.Delta.Omitted {
		omitted[o.Path] = true
	}
	for d := range layers {
		if p := "images/blobs/sha256/" + strings.TrimPrefix(d, "sha256:"); !omitted[p] {
			t.Errorf("the delta carries layer %s, which the base has", p)
		}
	}
	if delta.Manifest.FilesDigest() != base.Manifest.FilesDigest() {
		t.Error("the delta's manifest lists other files than the base's, for the same bundle.yaml")
	}
}
