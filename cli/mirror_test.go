package cli_test

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"airgapcoder/certs"
	"airgapcoder/mirror"
)

// writeBundleDir lays out what an installed bundle has for the mirror: a
// provider tree with a fake provider and an OCI layout with one image.
func writeBundleDir(t *testing.T) (dir, imageRef, digest string) {
	t.Helper()
	dir = t.TempDir()
	bin := filepath.Join(t.TempDir(), "terraform-provider-coder")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	addr, _ := mirror.ParseProviderAddress("registry.terraform.io/coder/coder")
	if err := mirror.AddProvider(filepath.Join(dir, mirror.ProvidersDir), addr, "2.20.0", mirror.Platform{OS: "linux", Arch: "amd64"}, bin); err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.Write(filepath.Join(dir, mirror.ImagesDir), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	imageRef = "docker.io/acme/tool:1.0"
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{mirror.RefNameAnnotation: imageRef})); err != nil {
		t.Fatal(err)
	}
	h, _ := img.Digest()
	return dir, imageRef, h.String()
}

// TestMirrorServe runs coder mirror serve, which generates its certificate
// on first use, and fetches from both services trusting DIR/certs.
func TestMirrorServe(t *testing.T) {
	// An installed appliance: the content in the current release,
	// certificates in DIR/certs.
	release, _, digest := writeBundleDir(t)
	dir := t.TempDir()
	if err := os.Symlink(release, filepath.Join(dir, "current")); err != nil {
		t.Fatal(err)
	}
	env := baseEnv(t)
	if _, stderr, code := run(t, env, "mirror", "serve", "--dir", dir, "--address", "no-port"); code != 2 {
		t.Errorf("bad --address: exit %d, want 2\n%s", code, stderr)
	}
	if _, stderr, code := run(t, env, "mirror", "serve"); code != 2 {
		t.Errorf("no --dir: exit %d, want 2\n%s", code, stderr)
	}

	addr := freeAddr(t)
	p := start(t, env, "mirror", "serve", "--dir", dir, "--address", addr)
	p.waitStderr(t, "Mirror serving https://"+addr+"/terraform/providers/", 30*time.Second)
	if !strings.Contains(p.stdout.String(), "created the appliance CA") {
		t.Errorf("stdout does not say the CA was created:\n%s", p.stdout)
	}

	store, err := certs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	client := store.HTTPClient()
	for _, c := range []struct{ path, contentType, header, value string }{
		{"/terraform/providers/registry.terraform.io/coder/coder/index.json", "application/json", "", ""},
		{"/v2/", "application/json", "Docker-Distribution-API-Version", "registry/2.0"},
		{"/v2/docker.io/acme/tool/manifests/1.0", "application/vnd.docker.distribution.manifest.v2+json", "Docker-Content-Digest", digest},
	} {
		resp, err := client.Get("https://" + addr + c.path)
		if err != nil {
			t.Fatalf("GET %s: %v", c.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != c.contentType || (c.header != "" && resp.Header.Get(c.header) != c.value) {
			t.Errorf("GET %s: got %d %v", c.path, resp.StatusCode, resp.Header)
		}
	}
	stopGracefully(t, p)
}

// TestMirrorPushImages runs coder mirror push-images into a registry with a
// CA of its own, imported with coder certs import.
func TestMirrorPushImages(t *testing.T) {
	dir, imageRef, digest := writeBundleDir(t)
	siteDir := t.TempDir()
	if _, err := certs.Generate(siteDir, []string{"127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	cert, err := certs.LoadServerCertificate(siteDir)
	if err != nil {
		t.Fatal(err)
	}
	var uploads atomic.Int64
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/uploads") {
			uploads.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	regAddr := strings.TrimPrefix(srv.URL, "https://")
	env := baseEnv(t, "DOCKER_CONFIG="+t.TempDir())

	for _, args := range [][]string{
		{"mirror", "push-images", "--dir", dir},
		{"mirror", "push-images", "--dir", dir, "--to", "http://" + regAddr},
		{"mirror", "push-images", "--dir", dir, "--to", regAddr, "--concurrency", "0"},
		{"mirror", "push-images", "--to", regAddr},
	} {
		if _, stderr, code := run(t, env, args...); code != 2 {
			t.Errorf("coder %s: exit %d, want 2\n%s", strings.Join(args, " "), code, stderr)
		}
	}

	// Without the site's CA in the trust store: an x509 error, exit 1.
	mustRun(t, env, "certs", "refresh", "--dir", dir)
	if _, stderr, code := run(t, env, "mirror", "push-images", "--dir", dir, "--to", regAddr+"/site"); code != 1 || !strings.Contains(stderr, "x509") {
		t.Errorf("push without the site CA: exit %d, want 1 with an x509 error\n%s", code, stderr)
	}

	mustRun(t, env, "certs", "import", "--dir", dir, filepath.Join(certs.CertsDir(siteDir), certs.CAFile))
	stdout, stderr, code := run(t, env, "mirror", "push-images", "--dir", dir, "--to", regAddr+"/site")
	want := regAddr + "/site/" + strings.TrimSuffix(imageRef, ":1.0") + ":1.0@" + digest
	if code != 0 || strings.TrimSpace(stdout) != want {
		t.Fatalf("push-images: exit %d, stdout %q, want %q\nstderr: %s", code, stdout, want, stderr)
	}
	if !strings.Contains(stderr, "[1/1] push "+imageRef) || !strings.Contains(stderr, "[1/1] done") {
		t.Errorf("progress lines:\n%s", stderr)
	}
	if uploads.Load() == 0 {
		t.Error("no blob was uploaded")
	}
	uploads.Store(0)
	mustRun(t, env, "mirror", "push-images", "--dir", dir, "--to", regAddr+"/site")
	if n := uploads.Load(); n != 0 {
		t.Errorf("second push: %d blob upload requests, want 0", n)
	}
}
