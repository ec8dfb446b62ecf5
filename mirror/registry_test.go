package mirror

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"airgapcoder/internal/testtier"
)

// registryFixture is a test layout and a Registry over it, without TLS.
type registryFixture struct {
	dir    string
	images []testImage
	h      http.Handler
}

func newRegistryFixture(t *testing.T) *registryFixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), ImagesDir)
	images := writeTestLayout(t, dir, 4096)
	reg, err := NewRegistry(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &registryFixture{dir: dir, images: images, h: reg}
}

func (f *registryFixture) do(t *testing.T, method, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

// manifestOf reads a manifest of the layout.
func (f *registryFixture) manifestOf(t *testing.T, h v1.Hash) v1.Manifest {
	t.Helper()
	var m v1.Manifest
	if err := json.Unmarshal(readFile(t, blobPath(f.dir, h)), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (f *registryFixture) indexOf(t *testing.T, h v1.Hash) v1.IndexManifest {
	t.Helper()
	var m v1.IndexManifest
	if err := json.Unmarshal(readFile(t, blobPath(f.dir, h)), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func registryErrorCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var body struct {
		Errors []struct{ Code, Message string } `json:"errors"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body.Errors) != 1 {
		t.Fatalf("error body: got %q, want the registry error format", rec.Body.String())
	}
	return body.Errors[0].Code
}

// TestRegistryProtocol checks the distribution API answers request by
// request.
func TestRegistryProtocol(t *testing.T) {
	f := newRegistryFixture(t)
	app, tool := f.images[0], f.images[1]
	idx := f.indexOf(t, app.digest)
	child := idx.Manifests[0]
	childManifest := f.manifestOf(t, child.Digest)
	uniqueLayer := childManifest.Layers[1].Digest
	toolLayer := f.manifestOf(t, tool.digest).Layers[0].Digest

	t.Run("version check", func(t *testing.T) {
		rec := f.do(t, "GET", "/v2/")
		if rec.Code != 200 || rec.Header().Get("Docker-Distribution-API-Version") != "registry/2.0" {
			t.Errorf("GET /v2/: got %d %v, want 200 with Docker-Distribution-API-Version: registry/2.0", rec.Code, rec.Header())
		}
	})

	manifestTests := []struct {
		name, path string
		digest     v1.Hash
		mediaType  string
	}{
		{"index by tag", "/v2/docker.io/library/testapp/manifests/1.0", app.digest, "application/vnd.oci.image.index.v1+json"},
		{"index by digest", "/v2/docker.io/library/testapp/manifests/" + app.digest.String(), app.digest, "application/vnd.oci.image.index.v1+json"},
		{"platform manifest by digest", "/v2/docker.io/library/testapp/manifests/" + child.Digest.String(), child.Digest, "application/vnd.oci.image.manifest.v1+json"},
		{"docker manifest by tag", "/v2/ghcr.io/acme/tool/manifests/v2", tool.digest, "application/vnd.docker.distribution.manifest.v2+json"},
		{"host with a port", "/v2/registry.internal_5000/team/app/manifests/3", f.images[2].digest, "application/vnd.oci.image.manifest.v1+json"},
	}
	for _, tt := range manifestTests {
		t.Run(tt.name, func(t *testing.T) {
			want := readFile(t, blobPath(f.dir, tt.digest))
			for _, method := range []string{"GET", "HEAD"} {
				rec := f.do(t, method, tt.path)
				h := rec.Header()
				if rec.Code != 200 || h.Get("Content-Type") != tt.mediaType || h.Get("Docker-Content-Digest") != tt.digest.String() || h.Get("Content-Length") != fmt.Sprint(len(want)) {
					t.Fatalf("%s: got %d, Content-Type %q, digest %q, length %q; want 200, %s, %s, %d",
						method, rec.Code, h.Get("Content-Type"), h.Get("Docker-Content-Digest"), h.Get("Content-Length"), tt.mediaType, tt.digest, len(want))
				}
				if method == "GET" && !bytes.Equal(rec.Body.Bytes(), want) {
					t.Errorf("GET body differs from the stored manifest")
				}
				if method == "HEAD" && rec.Body.Len() != 0 {
					t.Errorf("HEAD has a body of %d bytes", rec.Body.Len())
				}
			}
		})
	}

	t.Run("blob", func(t *testing.T) {
		want := readFile(t, blobPath(f.dir, uniqueLayer))
		path := "/v2/docker.io/library/testapp/blobs/" + uniqueLayer.String()
		rec := f.do(t, "GET", path)
		if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), want) || rec.Header().Get("Docker-Content-Digest") != uniqueLayer.String() {
			t.Fatalf("GET blob: got %d, %d bytes; want 200, %d bytes", rec.Code, rec.Body.Len(), len(want))
		}
		rec = f.do(t, "HEAD", path)
		if rec.Code != 200 || rec.Header().Get("Content-Length") != fmt.Sprint(len(want)) || rec.Body.Len() != 0 {
			t.Errorf("HEAD blob: got %d, length %q", rec.Code, rec.Header().Get("Content-Length"))
		}
		ranges := []struct {
			header string
			want   []byte
		}{
			{"bytes=0-99", want[:100]},
			{"bytes=100-", want[100:]},
			{"bytes=-50", want[len(want)-50:]},
		}
		for _, r := range ranges {
			rec := f.do(t, "GET", path, "Range", r.header)
			if rec.Code != 206 || !bytes.Equal(rec.Body.Bytes(), r.want) {
				t.Errorf("Range %s: got %d, %d bytes; want 206, %d bytes", r.header, rec.Code, rec.Body.Len(), len(r.want))
			}
		}
		etag := rec.Header().Get("ETag")
		if rec := f.do(t, "GET", path, "If-None-Match", etag); rec.Code != 304 {
			t.Errorf("If-None-Match %s: got %d, want 304", etag, rec.Code)
		}
		if rec := f.do(t, "GET", path, "Range", fmt.Sprintf("bytes=%d-", len(want)+10)); rec.Code != 416 {
			t.Errorf("unsatisfiable range: got %d, want 416", rec.Code)
		}
	})

	t.Run("tags and catalog", func(t *testing.T) {
		rec := f.do(t, "GET", "/v2/docker.io/library/testapp/tags/list")
		if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"name":"docker.io/library/testapp","tags":["1.0"]}` || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("tags list: got %d %s", rec.Code, rec.Body.String())
		}
		rec = f.do(t, "GET", "/v2/_catalog")
		want := `{"repositories":["docker.io/library/testapp","ghcr.io/acme/tool","registry.internal_5000/team/app"]}`
		if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != want {
			t.Errorf("catalog: got %d %s, want %s", rec.Code, rec.Body.String(), want)
		}
		rec = f.do(t, "GET", "/v2/_catalog?n=1")
		if strings.TrimSpace(rec.Body.String()) != `{"repositories":["docker.io/library/testapp"]}` || !strings.Contains(rec.Header().Get("Link"), "last=docker.io") {
			t.Errorf("catalog page 1: got %s, Link %q", rec.Body.String(), rec.Header().Get("Link"))
		}
		rec = f.do(t, "GET", "/v2/_catalog?n=1&last=docker.io/library/testapp")
		if strings.TrimSpace(rec.Body.String()) != `{"repositories":["ghcr.io/acme/tool"]}` {
			t.Errorf("catalog page 2: got %s", rec.Body.String())
		}
	})

	errorTests := []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"unknown repository", "GET", "/v2/docker.io/library/nope/manifests/1.0", 404, "NAME_UNKNOWN"},
		{"unknown tag", "GET", "/v2/docker.io/library/testapp/manifests/2.0", 404, "MANIFEST_UNKNOWN"},
		{"manifest of another repository", "GET", "/v2/ghcr.io/acme/tool/manifests/" + app.digest.String(), 404, "MANIFEST_UNKNOWN"},
		{"blob of another repository", "GET", "/v2/ghcr.io/acme/tool/blobs/" + uniqueLayer.String(), 404, "BLOB_UNKNOWN"},
		{"unknown blob", "GET", "/v2/ghcr.io/acme/tool/blobs/sha256:" + strings.Repeat("0", 64), 404, "BLOB_UNKNOWN"},
		{"bad digest", "GET", "/v2/ghcr.io/acme/tool/blobs/sha256:xyz", 400, "DIGEST_INVALID"},
		{"start upload", "POST", "/v2/ghcr.io/acme/tool/blobs/uploads/", 405, "UNSUPPORTED"},
		{"upload chunk", "PATCH", "/v2/ghcr.io/acme/tool/blobs/uploads/123", 405, "UNSUPPORTED"},
		{"finish upload", "PUT", "/v2/ghcr.io/acme/tool/blobs/uploads/123?digest=" + toolLayer.String(), 405, "UNSUPPORTED"},
		{"upload status", "GET", "/v2/ghcr.io/acme/tool/blobs/uploads/123", 405, "UNSUPPORTED"},
		{"put manifest", "PUT", "/v2/ghcr.io/acme/tool/manifests/v3", 405, "UNSUPPORTED"},
		{"delete manifest", "DELETE", "/v2/ghcr.io/acme/tool/manifests/" + tool.digest.String(), 405, "UNSUPPORTED"},
		{"delete blob", "DELETE", "/v2/ghcr.io/acme/tool/blobs/" + toolLayer.String(), 405, "UNSUPPORTED"},
		{"new repository", "POST", "/v2/x/y/blobs/uploads/", 405, "UNSUPPORTED"},
		{"not an API path", "GET", "/v2/ghcr.io/acme/tool", 404, "UNSUPPORTED"},
		{"malformed tag", "GET", "/v2/ghcr.io/acme/tool/manifests/-bad-tag", 404, "MANIFEST_UNKNOWN"},
		{"malformed referrers digest", "GET", "/v2/ghcr.io/acme/tool/referrers/sha256:xyz", 400, "DIGEST_INVALID"},
		{"referrers of an unknown repository", "GET", "/v2/x/y/referrers/" + tool.digest.String(), 404, "NAME_UNKNOWN"},
		{"bad page size", "GET", "/v2/_catalog?n=x", 400, "UNSUPPORTED"},
	}
	// Every error code is one of the distribution specification's.
	specCodes := map[string]bool{"BLOB_UNKNOWN": true, "BLOB_UPLOAD_INVALID": true, "BLOB_UPLOAD_UNKNOWN": true, "DIGEST_INVALID": true,
		"MANIFEST_BLOB_UNKNOWN": true, "MANIFEST_INVALID": true, "MANIFEST_UNKNOWN": true, "NAME_INVALID": true, "NAME_UNKNOWN": true,
		"SIZE_INVALID": true, "UNAUTHORIZED": true, "DENIED": true, "UNSUPPORTED": true, "TOOMANYREQUESTS": true}
	for _, tt := range errorTests {
		if !specCodes[tt.code] {
			t.Errorf("%s: code %s is not in the specification's list", tt.name, tt.code)
		}
	}
	t.Run("referrers", func(t *testing.T) {
		for _, q := range []string{"", "?artifactType=application/vnd.dev.cosign.artifact.sig.v1%2Bjson"} {
			rec := f.do(t, "GET", "/v2/ghcr.io/acme/tool/referrers/"+tool.digest.String()+q)
			if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/vnd.oci.image.index.v1+json" {
				t.Fatalf("referrers%s: %d %q, want 200 and an OCI image index", q, rec.Code, rec.Header().Get("Content-Type"))
			}
			var idx struct {
				SchemaVersion int               `json:"schemaVersion"`
				MediaType     string            `json:"mediaType"`
				Manifests     []json.RawMessage `json:"manifests"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &idx); err != nil || idx.SchemaVersion != 2 || idx.Manifests == nil || len(idx.Manifests) != 0 {
				t.Errorf("referrers%s: %s (%v), want an empty image index", q, rec.Body.String(), err)
			}
			if filtered := rec.Header().Get("OCI-Filters-Applied"); (q != "") != (filtered == "artifactType") {
				t.Errorf("referrers%s: OCI-Filters-Applied %q", q, filtered)
			}
		}
	})
	for _, tt := range errorTests {
		t.Run(tt.name, func(t *testing.T) {
			rec := f.do(t, tt.method, tt.path)
			if rec.Code != tt.status || rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("got %d %q, want %d application/json", rec.Code, rec.Header().Get("Content-Type"), tt.status)
			}
			if code := registryErrorCode(t, rec); code != tt.code {
				t.Errorf("error code: got %s, want %s", code, tt.code)
			}
		})
	}
}

// TestRegistryDamagedLayout checks a layout that does not match its records
// stops NewRegistry with a message naming the blob.
func TestRegistryDamagedLayout(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string, app testImage)
		want   string
	}{
		{"truncated layer", func(t *testing.T, dir string, app testImage) {
			var idx v1.IndexManifest
			json.Unmarshal(readFile(t, blobPath(dir, app.digest)), &idx)
			var m v1.Manifest
			json.Unmarshal(readFile(t, blobPath(dir, idx.Manifests[0].Digest)), &m)
			p := blobPath(dir, m.Layers[0].Digest)
			if err := os.Truncate(p, 10); err != nil {
				t.Fatal(err)
			}
		}, "bytes on disk"},
		{"missing platform manifest", func(t *testing.T, dir string, app testImage) {
			var idx v1.IndexManifest
			json.Unmarshal(readFile(t, blobPath(dir, app.digest)), &idx)
			if err := os.Remove(blobPath(dir, idx.Manifests[1].Digest)); err != nil {
				t.Fatal(err)
			}
		}, "no such file"},
		{"edited manifest", func(t *testing.T, dir string, app testImage) {
			p := blobPath(dir, app.digest)
			b := bytes.Replace(readFile(t, p), []byte("arm64"), []byte("arm65"), 1)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "does not match its digest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			images := writeTestLayout(t, dir, 1024)
			tt.damage(t, dir, images[0])
			_, err := NewRegistry(dir, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "docker.io/library/testapp:1.0") {
				t.Errorf("got %v, want an error naming the image and containing %q", err, tt.want)
			}
		})
	}

	// No layout at all is an empty registry.
	reg, err := NewRegistry(filepath.Join(t.TempDir(), "none"), nil)
	if err != nil || len(reg.Repositories()) != 0 {
		t.Errorf("missing layout: got %v, %v; want an empty registry", reg, err)
	}
}

// TestProviderHandler checks the provider mirror's answers, including what
// must be 404.
func TestProviderHandler(t *testing.T) {
	dir := t.TempDir()
	if err := AddProvider(dir, testAddr, "0.1.0", Platform{"linux", "amd64"}, fakeBinary(t, "provider")); err != nil {
		t.Fatal(err)
	}
	pdir := ProviderDir(dir, testAddr)
	if err := os.WriteFile(filepath.Join(pdir, ".hidden.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(pdir, "9.9.9.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := ProviderHandler(dir)
	base := "/registry.terraform.io/coder/coder/"
	tests := []struct {
		method, path string
		status       int
		contentType  string
		file         string
	}{
		{"GET", base + "index.json", 200, "application/json", "index.json"},
		{"HEAD", base + "index.json", 200, "application/json", ""},
		{"GET", base + "0.1.0.json", 200, "application/json", "0.1.0.json"},
		{"GET", base + "terraform-provider-coder_0.1.0_linux_amd64.zip", 200, "application/zip", "terraform-provider-coder_0.1.0_linux_amd64.zip"},
		{"GET", base + "0.2.0.json", 404, "application/json", ""},
		{"GET", "/registry.terraform.io/coder/other/index.json", 404, "application/json", ""},
		{"GET", base + ".hidden.json", 404, "application/json", ""},
		{"GET", base + "9.9.9.json", 404, "application/json", ""},
		{"GET", base + "notes.txt", 404, "application/json", ""},
		{"GET", "/registry.terraform.io/coder/", 404, "application/json", ""},
		{"GET", "/registry.terraform.io/../../etc/passwd/x", 404, "application/json", ""},
		{"GET", "/", 404, "application/json", ""},
		{"PUT", base + "index.json", 405, "application/json", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			if rec.Code != tt.status || rec.Header().Get("Content-Type") != tt.contentType {
				t.Fatalf("got %d %q, want %d %q", rec.Code, rec.Header().Get("Content-Type"), tt.status, tt.contentType)
			}
			if tt.file != "" && !bytes.Equal(rec.Body.Bytes(), readFile(t, filepath.Join(pdir, tt.file))) {
				t.Errorf("body differs from %s", tt.file)
			}
		})
	}
}

// TestPullWithCraneAndSkopeo pulls every image of a test layout from the
// mirror over HTTPS with go-containerregistry (crane's library, in process)
// and with the real skopeo, and checks digests, platforms and blobs.
func TestPullWithCraneAndSkopeo(t *testing.T) {
	testtier.Heavy(t, "runs skopeo")
	dir := t.TempDir()
	images := writeTestLayout(t, filepath.Join(dir, ImagesDir), 64<<10)
	m := startMirror(t, dir)
	opts := []crane.Option{crane.WithTransport(m.store.Transport())}

	t.Run("crane", func(t *testing.T) {
		repos, err := crane.Catalog(m.addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, img := range images {
			want = append(want, img.repo)
		}
		if !slices.Equal(repos, want) {
			t.Errorf("catalog: got %v, want %v", repos, want)
		}
		for _, img := range images {
			ref := m.addr + "/" + img.repo + ":" + img.tag
			tags, err := crane.ListTags(m.addr+"/"+img.repo, opts...)
			if err != nil || !slices.Equal(tags, []string{img.tag}) {
				t.Errorf("%s tags: got %v, %v", img.repo, tags, err)
			}
			digest, err := crane.Digest(ref, opts...)
			if err != nil || digest != img.digest.String() {
				t.Fatalf("%s digest: got %s, %v; want %s", ref, digest, err, img.digest)
			}
			// Pull everything into a new layout, as `crane pull --format=oci`
			// does; remote layers are verified against their digests as
			// they are read.
			out, err := layout.Write(t.TempDir(), empty.Index)
			if err != nil {
				t.Fatal(err)
			}
			r, err := name.ParseReference(ref)
			if err != nil {
				t.Fatal(err)
			}
			remoteOpts := []remote.Option{remote.WithTransport(m.store.Transport())}
			if img.index {
				idx, err := remote.Index(r, remoteOpts...)
				if err != nil {
					t.Fatal(err)
				}
				im, err := idx.IndexManifest()
				if err != nil {
					t.Fatal(err)
				}
				var platforms []string
				for _, d := range im.Manifests {
					platforms = append(platforms, d.Platform.String())
				}
				if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
					t.Errorf("platforms: got %v", platforms)
				}
				if err := out.AppendIndex(idx); err != nil {
					t.Fatalf("pull %s: %v", ref, err)
				}
			} else {
				img, err := remote.Image(r, remoteOpts...)
				if err != nil {
					t.Fatal(err)
				}
				if err := out.AppendImage(img); err != nil {
					t.Fatalf("pull %s: %v", ref, err)
				}
			}
			pulled, err := out.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			pm, _ := pulled.IndexManifest()
			if pm.Manifests[0].Digest != img.digest {
				t.Errorf("%s pulled as %s, want %s", ref, pm.Manifests[0].Digest, img.digest)
			}
		}
	})

	t.Run("skopeo", func(t *testing.T) {
		skopeo := lookTool(t, "skopeo")
		certDir := t.TempDir()
		if err := os.WriteFile(filepath.Join(certDir, "ca.crt"), readFile(t, filepath.Join(dir, "certs", "ca.pem")), 0o644); err != nil {
			t.Fatal(err)
		}
		policy := filepath.Join(t.TempDir(), "policy.json")
		if err := os.WriteFile(policy, []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		for i, img := range images {
			src := "docker://" + m.addr + "/" + img.repo + ":" + img.tag
			out := t.TempDir()
			args := []string{"--policy", policy, "copy", "--all", "--preserve-digests", "--retry-times", "0"}
			runEnv := env
			if i%2 == 0 {
				args = append(args, "--src-cert-dir", certDir)
			} else {
				// Trust through the environment, as child processes of the
				// appliance get it.
				args = append(args, "--src-tls-verify=true")
				runEnv = append(slices.Clone(env), m.store.Env()...)
			}
			// skopeo 1.9 writes OCI indexes only to oci: layouts and
			// Docker manifests, unconverted, only to dir: folders.
			var manifestFile string
			var locate func(v1.Hash, bool) string
			if img.index || i == 2 {
				args = append(args, src, "oci:"+out+":"+img.tag)
				var idx v1.IndexManifest
				runTool(t, runEnv, skopeo, args...)
				json.Unmarshal(readFile(t, filepath.Join(out, "index.json")), &idx)
				if len(idx.Manifests) != 1 {
					t.Fatalf("skopeo wrote %d images to the layout, want 1", len(idx.Manifests))
				}
				manifestFile = blobPath(out, idx.Manifests[0].Digest)
				locate = func(h v1.Hash, _ bool) string { return blobPath(out, h) }
			} else {
				args = append(args, src, "dir:"+out)
				runTool(t, runEnv, skopeo, args...)
				manifestFile = filepath.Join(out, "manifest.json")
				locate = func(h v1.Hash, manifest bool) string {
					if manifest {
						return filepath.Join(out, h.Hex+".manifest.json")
					}
					return filepath.Join(out, h.Hex)
				}
			}
			got := sha256.Sum256(readFile(t, manifestFile))
			if hex.EncodeToString(got[:]) != img.digest.Hex {
				t.Errorf("skopeo copied %s as sha256:%x, want %s", src, got, img.digest)
			}
			checkCopy(t, locate, filepath.Join(dir, ImagesDir), img)
		}
		// Without the CA, skopeo refuses the mirror.
		src := "docker://" + m.addr + "/" + images[0].repo + ":" + images[0].tag
		out, err := toolOutput(env, skopeo, "--policy", policy, "inspect", "--raw", "--retry-times", "0", src)
		if err == nil || !strings.Contains(out, "x509") {
			t.Errorf("skopeo without the CA: got %v\n%s\nwant an x509 error", err, out)
		}
	})

	t.Run("curl ranges", func(t *testing.T) {
		curl := lookTool(t, "curl")
		var idx v1.IndexManifest
		json.Unmarshal(readFile(t, blobPath(filepath.Join(dir, ImagesDir), images[0].digest)), &idx)
		var man v1.Manifest
		json.Unmarshal(readFile(t, blobPath(filepath.Join(dir, ImagesDir), idx.Manifests[0].Digest)), &man)
		layer := man.Layers[0].Digest
		blob := readFile(t, blobPath(filepath.Join(dir, ImagesDir), layer))
		url := "https://" + m.addr + "/v2/" + images[0].repo + "/blobs/" + layer.String()
		ca := filepath.Join(dir, "certs", "ca.pem")
		for _, r := range []struct {
			arg  string
			want []byte
		}{
			{"0-99", blob[:100]},
			{"1000-", blob[1000:]},
			{"-100", blob[len(blob)-100:]},
		} {
			out := filepath.Join(t.TempDir(), "part")
			code := runTool(t, nil, curl, "-sS", "--cacert", ca, "-r", r.arg, "-o", out, "-w", "%{http_code}", url)
			if code != "206" || !bytes.Equal(readFile(t, out), r.want) {
				t.Errorf("curl -r %s: got %s and %d bytes, want 206 and %d bytes", r.arg, code, len(readFile(t, out)), len(r.want))
			}
		}
	})
}

// checkCopy checks a copy of an image holds every manifest and blob of it,
// byte for byte; locate finds a manifest or blob in the copy.
func checkCopy(t *testing.T, locate func(h v1.Hash, manifest bool) string, layoutDir string, img testImage) {
	t.Helper()
	var manifests []v1.Hash
	if img.index {
		var idx v1.IndexManifest
		json.Unmarshal(readFile(t, blobPath(layoutDir, img.digest)), &idx)
		for _, d := range idx.Manifests {
			manifests = append(manifests, d.Digest)
			if got := readFile(t, locate(d.Digest, true)); !bytes.Equal(got, readFile(t, blobPath(layoutDir, d.Digest))) {
				t.Errorf("platform manifest %s differs", d.Digest)
			}
		}
	} else {
		manifests = []v1.Hash{img.digest}
	}
	for _, h := range manifests {
		var m v1.Manifest
		json.Unmarshal(readFile(t, blobPath(layoutDir, h)), &m)
		for _, b := range append(m.Layers, m.Config) {
			if got := readFile(t, locate(b.Digest, false)); !bytes.Equal(got, readFile(t, blobPath(layoutDir, b.Digest))) {
				t.Errorf("blob %s differs", b.Digest)
			}
		}
	}
}

// TestConcurrentPulls pulls the multi-platform image many times at once.
func TestConcurrentPulls(t *testing.T) {
	testtier.Heavy(t, "takes 5 s of concurrent pulls")
	dir := t.TempDir()
	images := writeTestLayout(t, filepath.Join(dir, ImagesDir), 256<<10)
	m := startMirror(t, dir)
	ref, err := name.ParseReference(m.addr + "/" + images[0].repo + ":" + images[0].tag)
	if err != nil {
		t.Fatal(err)
	}
	transport := m.store.Transport()
	const pullers = 32
	var wg sync.WaitGroup
	errs := make(chan error, pullers)
	for range pullers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- pullAll(ref, transport)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// pullAll reads every blob of an index through the registry API; remote
// layers check their digests as they are read.
func pullAll(ref name.Reference, transport http.RoundTripper) error {
	idx, err := remote.Index(ref, remote.WithTransport(transport))
	if err != nil {
		return err
	}
	return readIndex(idx)
}

func readIndex(idx v1.ImageIndex) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		if _, err := img.RawConfigFile(); err != nil {
			return err
		}
		if err := drainLayers(img); err != nil {
			return err
		}
	}
	return nil
}
