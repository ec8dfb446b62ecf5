package mirror

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"airgapcoder/certs"
	"airgapcoder/internal/coderprovider"
	"airgapcoder/internal/testrun"
	"airgapcoder/internal/testtier"
)

// providerBinary is the official Coder provider, built once per test binary
// as make build does (trimmed and stripped).
func providerBinary(t testing.TB) string {
	t.Helper()
	bin, err := coderprovider.Binary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// thisPlatform is the machine's platform, the one terraform asks for.
var thisPlatform = Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}

// addOurProvider puts the official provider (labelled registry.terraform.io/coder/coder 0.1.0)
// into the provider tree dir.
func addOurProvider(t testing.TB, dir string) {
	t.Helper()
	if err := AddProvider(dir, testAddr, "0.1.0", thisPlatform, providerBinary(t)); err != nil {
		t.Fatal(err)
	}
}

// testMirror is an appliance folder served by an in-process Server over
// HTTPS on loopback, with a generated CA.
type testMirror struct {
	dir   string
	addr  string
	store *certs.Store
	srv   *Server
}

// startMirror generates the appliance CA and certificate in dir (when
// missing) and serves dir on 127.0.0.1:0 until the test ends; edits change
// the server's options.
func startMirror(t testing.TB, dir string, edits ...func(*ServerOptions)) *testMirror {
	t.Helper()
	if _, err := certs.EnsureServer(dir, []string{"localhost", "127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	store, err := certs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := certs.LoadServerCertificate(dir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := ServerOptions{Dir: dir, Certificate: cert, Listener: ln, ShutdownTimeout: 5 * time.Second}
	for _, edit := range edits {
		edit(&opts)
	}
	srv, err := NewServer(opts)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	testrun.Start(t, "mirror server", srv.Run, srv.Ready())
	return &testMirror{dir: dir, addr: srv.Addr().String(), store: store, srv: srv}
}

// testImage is an image of the test layout.
type testImage struct {
	ref    string // original reference, as in the ref.name annotation
	repo   string // repository the mirror serves it as
	tag    string
	digest v1.Hash
	index  bool
}

// writeTestLayout writes an OCI layout at dir with three images: a
// two-platform OCI index (linux/amd64, linux/arm64, sharing a layer), a
// single-platform image with Docker media types, and an image from a
// registry with a port that shares the index's shared layer. layerSize is
// the size of each random layer.
func writeTestLayout(t testing.TB, dir string, layerSize int64) []testImage {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	shared, err := random.Layer(layerSize, types.OCILayer)
	must(err)
	ociBase := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	platformImage := func(arch string, layers ...v1.Layer) v1.Image {
		img, err := mutate.AppendLayers(ociBase, layers...)
		must(err)
		cfg, err := img.ConfigFile()
		must(err)
		cfg = cfg.DeepCopy()
		cfg.OS, cfg.Architecture = "linux", arch
		img, err = mutate.ConfigFile(img, cfg)
		must(err)
		return img
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range []string{"amd64", "arm64"} {
		unique, err := random.Layer(layerSize, types.OCILayer)
		must(err)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        platformImage(arch, shared, unique),
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	dockerImg, err := random.Image(layerSize, 2)
	must(err)
	portImg := platformImage("amd64", shared)

	p, err := layout.Write(dir, empty.Index)
	must(err)
	images := []testImage{
		{ref: "docker.io/library/testapp:1.0", repo: "docker.io/library/testapp", tag: "1.0", index: true},
		{ref: "ghcr.io/acme/tool:v2", repo: "ghcr.io/acme/tool", tag: "v2"},
		{ref: "registry.internal:5000/team/app:3", repo: "registry.internal_5000/team/app", tag: "3"},
	}
	annotate := func(ref string) layout.Option {
		return layout.WithAnnotations(map[string]string{RefNameAnnotation: ref})
	}
	must(appendIndexAsRegistriesServeIt(p, idx, images[0].ref))
	must(p.AppendImage(dockerImg, annotate(images[1].ref)))
	must(p.AppendImage(portImg, annotate(images[2].ref)))
	lp, err := p.ImageIndex()
	must(err)
	im, err := lp.IndexManifest()
	must(err)
	for i := range images {
		images[i].digest = im.Manifests[i].Digest
	}
	return images
}

// appendIndexAsRegistriesServeIt writes idx's images and then idx itself
// without the artifactType that go-containerregistry puts into every
// descriptor (registries' multi-platform images do not carry it; skopeo 1.9
// drops it when it re-serialises an index, and then refuses to copy with
// --preserve-digests).
func appendIndexAsRegistriesServeIt(p layout.Path, idx v1.ImageIndex, ref string) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	im = im.DeepCopy()
	for i, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		if err := p.WriteImage(img); err != nil {
			return err
		}
		im.Manifests[i].ArtifactType = ""
	}
	raw, err := json.Marshal(im)
	if err != nil {
		return err
	}
	h, size, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	if err := p.WriteBlob(h, io.NopCloser(bytes.NewReader(raw))); err != nil {
		return err
	}
	return p.AppendDescriptor(v1.Descriptor{MediaType: types.OCIImageIndex, Size: size, Digest: h,
		Annotations: map[string]string{RefNameAnnotation: ref}})
}

// lookTool finds a command-line tool the test needs; scripts/install-deps.sh
// installs them.
func lookTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found on the PATH: run scripts/install-deps.sh", name)
	}
	return p
}

// runTool runs a tool with env (nil: the test's own environment) and returns
// its trimmed stdout; it fails the test when the tool fails.
func runTool(t testing.TB, env []string, tool string, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(tool), strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// toolOutput runs a tool and returns its combined output and error.
func toolOutput(env []string, tool string, args ...string) (string, error) {
	cmd := exec.Command(tool, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// terraformFor finds the terraform binary as terraformBinary does, for
// tests and benchmarks alike.
func terraformFor(tb testing.TB) string {
	tb.Helper()
	testtier.Heavy(tb, "runs terraform")
	if p := os.Getenv("TERRAFORM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("terraform"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/local/bin/terraform"); err == nil {
		return "/usr/local/bin/terraform"
	}
	tb.Fatal("terraform not found (set TERRAFORM or put it on PATH)")
	return ""
}
