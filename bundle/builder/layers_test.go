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
	last := ""
	for _, img := range e.up.Images {
		for _, d := range img.Platforms {
			im, err := img.Index.Image(d)
			if err != nil {
				t.Fatal(err)
			}
			layers, err := im.Layers()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range layers {
				h, err := l.Digest()
				if err != nil {
					t.Fatal(err)
				}
				last = max(last, h.String())
			}
		}
	}
	for _, img := range e.up.Images {
		e.up.FailNext("/v2/"+img.Repository+"/blobs/"+last, 1000)
	}
	cfg := e.config(t, []string{"linux/amd64", "linux/arm64"}, imagesBody())
	out := t.TempDir()
	_, err := e.build(t, cfg, out, e.cache)
	if err == nil || !strings.Contains(err.Error(), "blob "+last+": ") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("build with a layer the registry never serves: got %v, want an error naming blob %s and the 503", err, last)
	}
	t.Logf("the error: %v", err)
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("a failed build left %d files in the output folder, such as %s", len(entries), entries[0].Name())
	}
}
