package builder

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocilayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"airgapcoder/bundle"
	"airgapcoder/internal/testwait"
	"airgapcoder/internal/upstreamtest"
	"airgapcoder/mirror"
)

const (
	testTerraform = "/usr/local/bin/terraform"
	testPostgres  = "/usr/lib/postgresql/15"
)

// buildEnv is a folder for bundle.yaml and its files, a cache, an output
// folder and a test upstream.
type buildEnv struct {
	// environ is the build's environment (none by default).
	environ []string
	up      *upstreamtest.Upstream
	// releasesKey is the key hc-install checks terraform releases with.
	releasesKey string
	dir         string
	cache       string
	out         string
	key         ed25519.PrivateKey
	pub         ed25519.PublicKey
}

func newBuildEnv(t *testing.T, opts upstreamtest.Options) *buildEnv {
	t.Helper()
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skip("the build tests run on linux/amd64 or linux/arm64")
	}
	seed := sha256.Sum256([]byte("bundle build tests"))
	key := ed25519.NewKeyFromSeed(seed[:])
	up := upstreamtest.New(t, opts)
	return &buildEnv{
		up:          up,
		releasesKey: up.Releases.ArmoredKey,
		dir:         t.TempDir(),
		cache:       t.TempDir(),
		out:         t.TempDir(),
		key:         key,
		pub:         key.Public().(ed25519.PublicKey),
	}
}

// otherArch is the linux architecture that is not this host's.
func otherArch() string {
	if runtime.GOARCH == "amd64" {
		return "arm64"
	}
	return "amd64"
}

// fakeELF writes the smallest ELF header that says "linux/<arch>
// executable": enough for the platform check of a coder {path}.
func fakeELF(t *testing.T, path, arch string) {
	t.Helper()
	machine := map[string]uint16{"amd64": 62, "arm64": 183}[arch]
	h := make([]byte, 64)
	copy(h, "\x7fELF\x02\x01\x01")
	binary.LittleEndian.PutUint16(h[16:], 2) // ET_EXEC
	binary.LittleEndian.PutUint16(h[18:], machine)
	binary.LittleEndian.PutUint32(h[20:], 1)
	binary.LittleEndian.PutUint16(h[52:], 64)
	binary.LittleEndian.PutUint16(h[54:], 56)
	binary.LittleEndian.PutUint16(h[58:], 64)
	if err := os.WriteFile(path, append(h, []byte("not really coder")...), 0o755); err != nil {
		t.Fatal(err)
	}
}

// registries is the registries: block that sends every test host to the
// upstream.
func (e *buildEnv) registries() string {
	return fmt.Sprintf("registries:\n  registry.terraform.io: %s\n  docker.io: %s\n  images.test: %s\n  releases.hashicorp.com: %s\n  %s: %s\n",
		e.up.URL, e.up.URL, e.up.URL, e.up.URL, upstreamtest.ModuleHost, e.up.URL)
}

// config writes bundle.yaml with body after a standard head and loads it.
func (e *buildEnv) config(t *testing.T, platforms []string, body string) *Config {
	t.Helper()
	yaml := "version: 1\nname: test\nrelease: 2026.11.1\nplatforms: [" + strings.Join(platforms, ", ") + "]\n" + body +
		"certs:\n  - " + e.up.CAFile + "\n" + e.registries()
	p := filepath.Join(e.dir, "bundle.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// build runs Build with the test's key, clock and upstream; edit, when
// given, changes the options first.
func (e *buildEnv) build(t *testing.T, cfg *Config, out, cache string, edit ...func(*Options)) (*Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log bytes.Buffer
	opts := Options{
		Config:      cfg,
		OutputDir:   out,
		Key:         e.key,
		CacheDir:    cache,
		BuildTime:   time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		Log:         &log,
		Environ:     append([]string{}, e.environ...),
		retryBase:   time.Millisecond,
		releasesKey: e.releasesKey,
	}
	for _, f := range edit {
		f(&opts)
	}
	res, err := Build(ctx, opts)
	t.Logf("build log:\n%s", log.String())
	return res, err
}

func providerBody() string {
	return "providers:\n  - source: registry.terraform.io/coder/coder\n    versions: [\"2.20.0\"]\n"
}

func imagesBody() string {
	return "images:\n  - docker.io/library/testbase:1\n  - images.test/team/tool:2\n"
}

// processTemplate is the repository's examples/templates/process (this
// file is in bundle/builder/).
func processTemplate() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", "templates", "process")
}

// TestBuildAcceptance builds a bundle of everything against the test
// upstream, then checks it with tools nobody here wrote: terraform init
// offline from the bundled provider tree and lock file, skopeo and
// go-containerregistry over the bundled OCI layout. A second build with the
// warm cache gives the same bytes and fetches no blob again.
func TestBuildAcceptance(t *testing.T) {
	for _, tool := range []string{testTerraform, testPostgres + "/bin/postgres"} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("%s is not installed (terraform 1.11.4 and PostgreSQL 15 are part of these machines; make test checks them)", tool)
		}
	}
	e := newBuildEnv(t, upstreamtest.Options{})
	host := runtime.GOOS + "/" + runtime.GOARCH
	other := "linux/" + otherArch()
	fakeELF(t, filepath.Join(e.dir, "coder-other"), otherArch())
	cfg := e.config(t, []string{host, other},
		"coder:\n  - {binary: self}\n  - {path: ./coder-other}\n"+
			"terraform: {version: 1.11.4, path: "+testTerraform+"}\n"+
			"postgres: {path: "+testPostgres+"}\n"+
			providerBody()+imagesBody()+
			"templates:\n  - "+processTemplate()+"\n")

	res, err := e.build(t, cfg, e.out, e.cache)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bundle %s: %d bytes, sha256 %s, %d files", res.Path, res.Size, res.SHA256, len(res.Manifest.Files))
	if got := sha256File(t, res.Path); got != res.SHA256 {
		t.Fatalf("Result.SHA256 %s, the file has %s", res.SHA256, got)
	}
	coldBlobs := e.up.BlobGets()
	for path, n := range coldBlobs {
		if n != 1 {
			t.Errorf("cold build: GET %s %d times, want once", path, n)
		}
	}
	shared, err := e.up.SharedLayers()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range shared {
		for _, img := range e.up.Images {
			if n := coldBlobs["/v2/"+img.Repository+"/blobs/"+d.String()]; n > 0 && !onlyIn(coldBlobs, d.String(), img.Repository) {
				t.Errorf("shared layer %s fetched from more than one repository", d)
			}
		}
	}

	dir := filepath.Join(t.TempDir(), "extracted")
	m, err := bundle.Extract(context.Background(), res.Path, dir, e.pub, false)
	if err != nil {
		t.Fatal(err)
	}
	checkComponents(t, e, &m, host, other)
	checkTerraformInit(t, dir, host)
	checkImages(t, e, dir)
	checkSharedLayersOnce(t, e, &m, shared)

	// The same inputs with the warm cache: the same bytes, no blob fetched.
	e.up.ResetCounts()
	again := t.TempDir()
	res2, err := e.build(t, cfg, again, e.cache)
	if err != nil {
		t.Fatal(err)
	}
	if res2.SHA256 != res.SHA256 {
		t.Errorf("second build: sha256 %s, first %s: want identical bundles", res2.SHA256, res.SHA256)
	}
	if blobs := e.up.BlobGets(); len(blobs) != 0 {
		t.Errorf("warm build fetched blobs again: %v", blobs)
	}
	if res2.Downloaded != 0 {
		t.Errorf("warm build downloaded %d bytes of content, want 0", res2.Downloaded)
	}
}

func onlyIn(counts map[string]int, digest, repo string) bool {
	for path, n := range counts {
		if n > 0 && strings.HasSuffix(path, "/blobs/"+digest) && !strings.HasPrefix(path, "/v2/"+repo+"/") {
			return false
		}
	}
	return true
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func checkComponents(t *testing.T, e *buildEnv, m *bundle.Manifest, host, other string) {
	t.Helper()
	c := m.Components
	if len(c.Coder) != 2 || c.Coder[0].Path == c.Coder[1].Path {
		t.Errorf("coder: got %+v, want two binaries", c.Coder)
	}
	if c.Terraform == nil || c.Terraform.Version != "1.11.4" || c.Terraform.Source != "local" || len(c.Terraform.Binaries) != 1 || c.Terraform.Binaries[0].Platform != host {
		t.Errorf("terraform: got %+v", c.Terraform)
	}
	if c.Postgres == nil || c.Postgres.Source != "local" || !strings.HasPrefix(c.Postgres.Version, "15.") || len(c.Postgres.Archives) != 1 {
		t.Errorf("postgres: got %+v", c.Postgres)
	}
	if len(c.Providers) != 1 {
		t.Fatalf("providers: got %+v", c.Providers)
	}
	p := c.Providers[0]
	if p.Source != "registry.terraform.io/coder/coder" || p.Version != "2.20.0" || !slices.Equal(p.Platforms, sortedPair(host, other)) {
		t.Errorf("provider: got %+v", p)
	}
	for _, plat := range p.Platforms {
		h1, zh, err := e.up.Provider.Hashes("2.20.0", strings.ReplaceAll(plat, "/", "_"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Hashes[plat], []string{h1, zh}) {
			t.Errorf("provider hashes %s: got %v, want the upstream zip's %s %s", plat, p.Hashes[plat], h1, zh)
		}
	}
	if len(c.Images) != 2 {
		t.Fatalf("images: got %+v", c.Images)
	}
	for i, img := range e.up.Images {
		if c.Images[i].Ref != img.Ref || c.Images[i].Digest != img.Digest.String() {
			t.Errorf("image %d: got %s %s, want %s %s", i, c.Images[i].Ref, c.Images[i].Digest, img.Ref, img.Digest)
		}
	}
	if len(c.Templates) != 1 || c.Templates[0].Name != "process" || !slices.Equal(c.Templates[0].Providers, []string{"registry.terraform.io/coder/coder 2.20.0"}) {
		t.Errorf("templates: got %+v", c.Templates)
	}
	if len(c.Certs) != 1 || !strings.Contains(c.Certs[0].Subject, "upstreamtest CA") {
		t.Errorf("certs: got %+v", c.Certs)
	}
}

func sortedPair(a, b string) []string {
	s := []string{a, b}
	slices.Sort(s)
	return s
}

// checkTerraformInit runs the bundled terraform's init in the bundled
// process template with the bundle's provider tree as the only
// installation method, the generated lock file read-only, and every
// network connection sent to a dead proxy.
func checkTerraformInit(t *testing.T, dir, host string) {
	t.Helper()
	tf := filepath.Join(dir, filepath.FromSlash(bundle.TerraformPath(host)))
	tmpl := filepath.Join(dir, "templates", "process")
	lockBefore, err := os.ReadFile(filepath.Join(tmpl, ".terraform.lock.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("generated lock file:\n%s", lockBefore)
	rc := filepath.Join(t.TempDir(), "terraform.rc")
	cli := fmt.Sprintf("disable_checkpoint = true\nprovider_installation {\n  filesystem_mirror {\n    path = %q\n  }\n}\n", filepath.Join(dir, "providers"))
	if err := os.WriteFile(rc, []byte(cli), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tf, "init", "-input=false", "-no-color", "-lockfile=readonly")
	cmd.Dir = tmpl
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"CHECKPOINT_DISABLE=1",
		"TF_CLI_CONFIG_FILE=" + rc,
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=",
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("terraform init in the bundled template: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Installed coder/coder v2.20.0") {
		t.Errorf("terraform init did not install our provider 2.20.0:\n%s", out)
	}
	lockAfter, _ := os.ReadFile(filepath.Join(tmpl, ".terraform.lock.hcl"))
	if !bytes.Equal(lockBefore, lockAfter) {
		t.Errorf("terraform init changed the lock file:\n%s", lockAfter)
	}
}

// checkImages reads every image back from the bundled layout with
// go-containerregistry (validating every blob) and with skopeo, and
// compares digests with the upstream's.
func checkImages(t *testing.T, e *buildEnv, dir string) {
	t.Helper()
	lp, err := ocilayout.FromPath(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	// The images in file order, then what refers to the signed one: its
	// two referrers (signature, SBOM) and its cosign signature tag.
	signed := e.up.Signed
	wantRefs := []string{
		"images.test/team/tool@" + signed.Referrers[0].Digest.String(),
		"images.test/team/tool@" + signed.Referrers[1].Digest.String(),
		"images.test/team/tool:" + signed.SignatureTag,
	}
	if len(im.Manifests) != len(e.up.Images)+len(wantRefs) {
		t.Fatalf("index.json: %d entries, want %d images and %d artifacts", len(im.Manifests), len(e.up.Images), len(wantRefs))
	}
	var gotRefs []string
	for _, d := range im.Manifests[len(e.up.Images):] {
		gotRefs = append(gotRefs, d.Annotations[mirror.RefNameAnnotation])
	}
	slices.Sort(gotRefs)
	slices.Sort(wantRefs)
	if !slices.Equal(gotRefs, wantRefs) {
		t.Errorf("index.json artifacts: got %v, want %v", gotRefs, wantRefs)
	}
	for i, want := range e.up.Images {
		d := im.Manifests[i]
		if got := d.Annotations[mirror.RefNameAnnotation]; got != want.Ref {
			t.Errorf("index.json[%d] ref.name: got %q, want %q", i, got, want.Ref)
		}
		if d.Digest != want.Digest {
			t.Errorf("%s: digest %s, upstream %s", want.Ref, d.Digest, want.Digest)
		}
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := child.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cm.Manifests {
			if c.Platform != nil && c.Platform.OS == "unknown" {
				continue // an attestation: go-containerregistry does not see in-toto layers as layers (skopeo copies it below)
			}
			img, err := child.Image(c.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate.Image(img); err != nil {
				t.Errorf("%s %s: go-containerregistry validation: %v", want.Ref, c.Digest, err)
			}
		}
	}
	// The appliance's mirror serves this layout: it must load it whole.
	reg, err := mirror.NewRegistry(filepath.Join(dir, "images"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("mirror.NewRegistry over the bundled layout: %v", err)
	}
	if got, want := reg.Repositories(), []string{"docker.io/library/testbase", "images.test/team/tool"}; !slices.Equal(got, want) {
		t.Errorf("mirror repositories: got %v, want %v", got, want)
	}
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		t.Log("skopeo not installed: checked with go-containerregistry only")
		return
	}
	for _, want := range e.up.Images {
		src := "oci:" + filepath.Join(dir, "images") + ":" + want.Ref
		raw, err := exec.Command(skopeo, "inspect", "--raw", src).Output()
		if err != nil {
			t.Fatalf("skopeo inspect --raw %s: %v", src, exitStderr(err))
		}
		if got := "sha256:" + sha256Hex(raw); got != want.Digest.String() {
			t.Errorf("skopeo: %s has digest %s, upstream %s", want.Ref, got, want.Digest)
		}
		// skopeo 1.9 drops the OCI 1.1 artifactType field when it writes
		// an index, so it cannot copy one with --preserve-digests; a copy
		// still reads and checks every blob.
		dst := "oci:" + filepath.Join(t.TempDir(), "copy") + ":x"
		if out, err := exec.Command(skopeo, "copy", "--all", src, dst).CombinedOutput(); err != nil {
			t.Errorf("skopeo copy --all %s: %v\n%s", src, err, out)
		}
		for plat, d := range want.Platforms {
			goos, arch, _ := strings.Cut(plat, "/")
			out, err := exec.Command(skopeo, "inspect", "--override-os", goos, "--override-arch", arch, "--format", "{{range .Layers}}{{.}} {{end}}", src).Output()
			if err != nil {
				t.Fatalf("skopeo inspect %s %s: %v", src, plat, exitStderr(err))
			}
			img, err := want.Index.Image(d)
			if err != nil {
				t.Fatal(err)
			}
			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			var wantLayers []string
			for _, l := range layers {
				h, _ := l.Digest()
				wantLayers = append(wantLayers, h.String())
			}
			if got := strings.Fields(string(out)); !slices.Equal(got, wantLayers) {
				t.Errorf("skopeo: %s %s has layers %v, upstream %v", want.Ref, plat, got, wantLayers)
			}
		}
	}
}

func exitStderr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return err
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checkSharedLayersOnce: the bundle stores each blob once, shared layers
// included.
func checkSharedLayersOnce(t *testing.T, e *buildEnv, m *bundle.Manifest, shared []v1.Hash) {
	t.Helper()
	count := map[string]int{}
	for _, f := range m.Files {
		if strings.HasPrefix(f.Path, "images/blobs/sha256/") {
			count[strings.TrimPrefix(f.Path, "images/blobs/sha256/")]++
		}
	}
	for _, d := range shared {
		if n := count[d.Hex]; n != 1 {
			t.Errorf("shared layer %s is stored %d times, want once", d, n)
		}
	}
	all, err := e.up.Blobs()
	if err != nil {
		t.Fatal(err)
	}
	if len(count) != len(all) {
		t.Errorf("images/blobs holds %d blobs, want %d (every upstream blob, each once)", len(count), len(all))
	}
	for d := range all {
		if count[d.Hex] != 1 {
			t.Errorf("blob %s is stored %d times, want once", d, count[d.Hex])
		}
	}
}

// TestBuildReproducible: two builds with cold caches of their own give
// byte-identical bundles.
func TestBuildReproducible(t *testing.T) {
	e := newBuildEnv(t, upstreamtest.Options{})
	host := runtime.GOOS + "/" + runtime.GOARCH
	cfg := e.config(t, []string{host}, providerBody()+imagesBody()+"templates:\n  - "+processTemplate()+"\n")
	a, err := e.build(t, cfg, t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.build(t, cfg, t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if a.SHA256 != b.SHA256 || a.Size != b.Size {
		t.Fatalf("two builds: %s (%d bytes) and %s (%d bytes), want identical", a.SHA256, a.Size, b.SHA256, b.Size)
	}
	// A single-platform bundle of multi-platform images keeps each
	// platform's manifest and a new index over them.
	for i, img := range e.up.Images {
		got := a.Manifest.Components.Images[i]
		if got.Digest == img.Digest.String() || !strings.HasSuffix(got.Upstream, "@"+img.Digest.String()) {
			t.Errorf("%s: digest %s, upstream %s: want a new index and the upstream digest recorded", img.Ref, got.Digest, got.Upstream)
		}
	}
}

// TestBuildProviderVerification: a zip that does not match SHA256SUMS, or
// a SHA256SUMS whose signature does not verify, fails the build, naming the
// provider and the reason, and leaves no bundle.
func TestBuildProviderVerification(t *testing.T) {
	host := runtime.GOOS + "_" + runtime.GOARCH
	tests := []struct {
		name  string
		setup func(u *upstreamtest.Upstream)
		want  []string
	}{
		{
			name:  "corrupted zip",
			setup: func(u *upstreamtest.Upstream) { u.CorruptZip("2.20.0", host, true) },
			want:  []string{"bundle.yaml:6: providers[0]", "registry.terraform.io/coder/coder 2.20.0 " + strings.ReplaceAll(host, "_", "/"), "terraform-provider-coder_2.20.0_" + host + ".zip does not match the signed SHA256SUMS"},
		},
		{
			name:  "signature by another key",
			setup: func(u *upstreamtest.Upstream) { u.SetSignature(upstreamtest.SignatureWrongKey) },
			want:  []string{"bundle.yaml:6: providers[0]", "registry.terraform.io/coder/coder 2.20.0", "SHA256SUMS signature does not verify with the registry's signing key"},
		},
		{
			name:  "SHA256SUMS changed after signing",
			setup: func(u *upstreamtest.Upstream) { u.SetSignature(upstreamtest.SignatureTampered) },
			want:  []string{"bundle.yaml:6: providers[0]", "registry.terraform.io/coder/coder 2.20.0", "SHA256SUMS signature does not verify"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newBuildEnv(t, upstreamtest.Options{ProviderPlatforms: []string{host}})
			tt.setup(e.up)
			cfg := e.config(t, []string{strings.ReplaceAll(host, "_", "/")}, providerBody())
			_, err := e.build(t, cfg, e.out, e.cache)
			if err == nil {
				t.Fatal("build succeeded, want a failure")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not say %q", err, w)
				}
			}
			if names := dirNames(t, e.out); len(names) != 0 {
				t.Errorf("output folder holds %v after a failed build, want nothing", names)
			}
			// Nothing unverified is kept under a blob name.
			names, _ := filepath.Glob(filepath.Join(e.cache, "blobs", "sha256", "*"))
			for _, n := range names {
				if d, _, _ := fileDigest(n); !strings.HasSuffix(n, ".partial") && "sha256:"+filepath.Base(n) != d {
					t.Errorf("cache holds %s, whose content does not match its name", n)
				}
			}
		})
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestBuildRetriesAndResumes: requests that fail with 503 are retried, and
// a download a crashed build left half done continues where it stopped.
func TestBuildRetriesAndResumes(t *testing.T) {
	host := runtime.GOOS + "_" + runtime.GOARCH
	e := newBuildEnv(t, upstreamtest.Options{ProviderPlatforms: []string{host}})
	zipName := "terraform-provider-coder_2.20.0_" + host + ".zip"
	zip := e.up.Provider.Zips[zipName]
	sum := sha256.Sum256(zip)
	// A crashed build left the first half.
	partial := filepath.Join(e.cache, "blobs", "sha256", hex.EncodeToString(sum[:])+".partial")
	if err := os.MkdirAll(filepath.Dir(partial), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(partial, zip[:len(zip)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	e.up.FailNext("/.well-known/terraform.json", 2)
	e.up.FailNext("/files/2.20.0/"+zipName, 1)
	cfg := e.config(t, []string{strings.ReplaceAll(host, "_", "/")}, providerBody())
	res, err := e.build(t, cfg, e.out, e.cache)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.up.Count("GET /.well-known/terraform.json"); n != 3 {
		t.Errorf("service discovery: %d requests, want 3 (two 503s, then success)", n)
	}
	if n := e.up.Count("GET /files/2.20.0/" + zipName); n != 2 {
		t.Errorf("zip: %d requests, want 2 (a 503, then the rest)", n)
	}
	if want := int64(len(zip) - len(zip)/2); res.Downloaded != want {
		t.Errorf("downloaded %d bytes, want %d: the second half only", res.Downloaded, want)
	}
}

// TestBuildLocalProviderFolder: a folder in mirror layout is copied after
// its zh: hashes are checked; a zip that does not match is refused.
func TestBuildLocalProviderFolder(t *testing.T) {
	e := newBuildEnv(t, upstreamtest.Options{})
	plat := mirror.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}
	folder := filepath.Join(e.dir, "providers")
	addr := mirror.ProviderAddress{Hostname: "registry.terraform.io", Namespace: "coder", Type: "coder"}
	if err := mirror.AddProvider(folder, addr, "2.20.0", plat, e.up.Provider.Binary()); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(t, []string{plat.OS + "/" + plat.Arch}, "providers:\n  - {path: ./providers}\ntemplates:\n  - "+processTemplate()+"\n")
	res, err := e.build(t, cfg, e.out, e.cache)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := mirror.ReadRelease(folder, addr, "2.20.0")
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Manifest.Components.Providers[0].Hashes[plat.OS+"/"+plat.Arch]; !slices.Equal(got, rel.Archives[plat.String()].Hashes) {
		t.Errorf("hashes: got %v, want the folder's %v", got, rel.Archives[plat.String()].Hashes)
	}

	// Damage the zip: the build refuses it.
	zipPath := filepath.Join(mirror.ProviderDir(folder, addr), mirror.ZipName(addr, "2.20.0", plat))
	f, err := os.OpenFile(zipPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("junk"))
	f.Close()
	_, err = e.build(t, cfg, t.TempDir(), e.cache)
	if err == nil || !strings.Contains(err.Error(), "does not match 2.20.0.json") || !strings.Contains(err.Error(), "providers[0]") {
		t.Fatalf("got %v, want a hash mismatch naming providers[0]", err)
	}
}

// TestBuildTemplateChecks: a template that needs a provider or an image
// the bundle does not hold fails the build, naming the template and what
// is missing.
func TestBuildTemplateChecks(t *testing.T) {
	e := newBuildEnv(t, upstreamtest.Options{})
	host := runtime.GOOS + "/" + runtime.GOARCH
	write := func(name, tf string) string {
		dir := filepath.Join(e.dir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(tf), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	needsImage := write("needs-image", `terraform {
  required_providers {
    coder = { source = "registry.terraform.io/coder/coder", version = ">= 2.20.0" }
  }
}
resource "coder_agent" "main" {
  os   = "linux"
  arch = "amd64"
}
resource "coder_container" "ws" {
  image = "docker.io/library/testbase:1"
  sidecar {
    image = "ubuntu:22.04"
  }
}
`)
	needsProvider := write("needs-provider", `resource "null_resource" "x" {}
`)
	needsVersion := write("needs-version", `terraform {
  required_providers {
    coder = { source = "registry.terraform.io/coder/coder", version = "~> 3.0" }
  }
}
`)
	remoteModule := write("remote-module", `module "x" {
  source = "git::https://example.com/x.git"
}
`)
	// Everything missing is named at once, not only the first.
	needsSeveral := write("needs-several", `terraform {
  required_providers {
    docker = { source = "kreuzwerker/docker" }
  }
}
resource "docker_volume" "v" {}
data "external" "e" {
  program = ["true"]
}
module "code-server" {
  source  = "registry.coder.com/coder/code-server/coder"
  version = "~> 1.0"
}
`)
	tests := []struct {
		dir  string
		want string
	}{
		{needsImage, `needs-image: main.tf:13: image "ubuntu:22.04" is not in the bundle (add docker.io/library/ubuntu:22.04 to images:)`},
		{needsProvider, "needs-provider: the template needs 1 thing that the bundle does not hold, and terraform must not fetch them from the network:\n" +
			"  - provider registry.terraform.io/hashicorp/null (main.tf:1)\nAdd to bundle.yaml:\nproviders:\n  - source: registry.terraform.io/hashicorp/null\n"},
		{needsVersion, "  - provider registry.terraform.io/coder/coder ~> 3.0 (it holds only 2.20.0) (required_providers.coder)"},
		{remoteModule, `  - remote module git::https://example.com/x.git (main.tf:1: module "x")` + "\nA module from git, an http archive or a bucket cannot come offline"},
		{needsSeveral, "needs 3 things that the bundle does not hold, and terraform must not fetch them from the network:\n" +
			"  - provider registry.terraform.io/hashicorp/external (main.tf:7)\n" +
			"  - provider registry.terraform.io/kreuzwerker/docker (main.tf:6)\n" +
			`  - module registry.coder.com/coder/code-server/coder ~> 1.0 (main.tf:10: module "code-server")` + "\n" +
			"Add to bundle.yaml:\nproviders:\n  - source: registry.terraform.io/hashicorp/external\n    versions: [\"VERSION\"]    # an exact version, such as the latest\n" +
			"  - source: registry.terraform.io/kreuzwerker/docker\n    versions: [\"VERSION\"]    # an exact version, such as the latest\n" +
			"modules:\n  - source: registry.coder.com/coder/code-server/coder\n    version: \"~> 1.0\""},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.dir), func(t *testing.T) {
			cfg := e.config(t, []string{host}, providerBody()+imagesBody()+"templates:\n  - "+tt.dir+"\n")
			_, err := e.build(t, cfg, t.TempDir(), e.cache)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v\nwant an error saying %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), "templates[0]: template "+filepath.Base(tt.dir)) {
				t.Errorf("error %q does not name the template entry", err)
			}
		})
	}
}

// TestBuildMavenPostgres: postgres {version} takes zonky's jars from the
// repository for every platform and bundles the archive inside.
func TestBuildMavenPostgres(t *testing.T) {
	e := newBuildEnv(t, upstreamtest.Options{})
	cfg := e.config(t, []string{"linux/amd64", "linux/arm64"},
		"postgres:\n  version: "+e.up.Postgres.Version+"\n  repository_url: "+e.up.Postgres.RepositoryURL+"\n")
	res, err := e.build(t, cfg, e.out, e.cache)
	if err != nil {
		t.Fatal(err)
	}
	pg := res.Manifest.Components.Postgres
	if pg == nil || pg.Source != "maven" || len(pg.Archives) != 2 {
		t.Fatalf("postgres: got %+v", pg)
	}
	for _, a := range pg.Archives {
		zp := zonkyPlatform(mustPlatform(t, a.Platform), pg.Version)
		want := e.up.Postgres.Archives[zp]
		if a.Path != "postgres/embedded-postgres-binaries-"+zp+"-"+pg.Version+".txz" || a.SHA256 != sha256Hex(want) {
			t.Errorf("archive %+v: want %s with sha256 %s", a, zp, sha256Hex(want))
		}
	}
}

func mustPlatform(t *testing.T, s string) mirror.Platform {
	t.Helper()
	p, err := parsePlatform(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBuildTerraformRelease: terraform {version} comes from the releases
// site (here the upstream, through the registries: override), verified by
// hc-install against the signed SHA256SUMS, and is checked to be that
// version; a second build takes it from the cache.
func TestBuildTerraformRelease(t *testing.T) {
	e := newBuildEnv(t, upstreamtest.Options{})
	host := runtime.GOOS + "/" + runtime.GOARCH
	cfg := e.config(t, []string{host}, "terraform: {version: "+e.up.Releases.Version+"}\n")
	res, err := e.build(t, cfg, e.out, e.cache)
	if err != nil {
		t.Fatal(err)
	}
	tf := res.Manifest.Components.Terraform
	if tf == nil || tf.Source != "releases" || len(tf.Binaries) != 1 || tf.Binaries[0].SHA256 != sha256Hex(e.up.Releases.Script) {
		t.Fatalf("terraform: got %+v, want the release's binary", tf)
	}
	zip := fmt.Sprintf("GET /terraform/%s/terraform_%s_%s_%s.zip", e.up.Releases.Version, e.up.Releases.Version, runtime.GOOS, runtime.GOARCH)
	if n := e.up.Count(zip); n != 1 {
		t.Errorf("%s: %d requests, want 1", zip, n)
	}
	if _, err := e.build(t, cfg, t.TempDir(), e.cache); err != nil {
		t.Fatal(err)
	}
	if n := e.up.Count(zip); n != 1 {
		t.Errorf("second build: %s: %d requests in all, want 1 (cached)", zip, n)
	}

	// With HashiCorp's own key the test release's signature fails.
	e.releasesKey = ""
	_, err = e.build(t, cfg, t.TempDir(), t.TempDir())
	t.Logf("with HashiCorp's key: %v", err)
	if err == nil || !strings.Contains(err.Error(), "terraform: terraform "+e.up.Releases.Version+" from releases") {
		t.Fatalf("got %v, want a verification failure naming terraform", err)
	}
}

// TestBuildDamagedCache: a cache file whose content no longer matches its
// name (a crash tore it, a disk flipped a bit) is not trusted: it is
// removed and fetched again.
func TestBuildDamagedCache(t *testing.T) {
	host := runtime.GOOS + "_" + runtime.GOARCH
	e := newBuildEnv(t, upstreamtest.Options{ProviderPlatforms: []string{host}})
	cfg := e.config(t, []string{strings.ReplaceAll(host, "_", "/")}, providerBody())
	first, err := e.build(t, cfg, t.TempDir(), e.cache)
	if err != nil {
		t.Fatal(err)
	}
	zipName := "terraform-provider-coder_2.20.0_" + host + ".zip"
	zip := e.up.Provider.Zips[zipName]
	cached := filepath.Join(e.cache, "blobs", "sha256", sha256Hex(zip))
	damaged := bytes.Clone(zip)
	damaged[len(damaged)/3] ^= 0x01
	if err := os.WriteFile(cached, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	second, err := e.build(t, cfg, t.TempDir(), e.cache)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.up.Count("GET /files/2.20.0/" + zipName); n != 2 {
		t.Errorf("zip fetched %d times, want 2 (again after the damage)", n)
	}
	if second.SHA256 != first.SHA256 {
		t.Errorf("bundle after the damage %s, before %s: want identical", second.SHA256, first.SHA256)
	}
}

// TestBuildProgress: plain lines without a terminal; on a terminal the
// lines scroll above one status line that is cleared at the end.
func TestBuildProgress(t *testing.T) {
	var plain bytes.Buffer
	p := newBuildProgress(&plain, false)
	p.addBytes(3 << 20)
	p.logf("provider %s", "x")
	p.close()
	if got := plain.String(); got != "bundle: provider x\n" {
		t.Errorf("plain: got %q", got)
	}

	var tty bytes.Buffer
	p = newBuildProgress(&tty, true)
	p.addBytes(3 << 20)
	p.logf("provider %s", "x")
	// The status line is drawn under p.mu, by logf and by each redraw.
	output := func() string { p.mu.Lock(); defer p.mu.Unlock(); return tty.String() }
	testwait.For(t, 10*time.Second, "a redraw of the status line after logf's", func() (bool, string) {
		return strings.Count(output(), "3.0 MiB downloaded, ") >= 2, output()
	})
	p.addBytes(1 << 20) // layers download while the bundle is written
	p.writing(50, 100)
	testwait.For(t, 10*time.Second, "a redraw showing the bundle being written", func() (bool, string) {
		return strings.Contains(output(), "writing the bundle: 50%, 4.0 MiB downloaded, "), output()
	})
	p.close()
	got := tty.String()
	for _, want := range []string{"\r\x1b[Kprovider x\n", "\r\x1b[K3.0 MiB downloaded, ", "writing the bundle: 50%, 4.0 MiB downloaded, "} {
		if !strings.Contains(got, want) {
			t.Errorf("terminal output %q lacks %q", got, want)
		}
	}
	if !strings.HasSuffix(got, "\r\x1b[K") {
		t.Errorf("terminal output %q does not end by clearing the status line", got)
	}
}
