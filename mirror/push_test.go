package mirror

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"airgapcoder/certs"
)

// siteRegistry is go-containerregistry's test registry on loopback over
// HTTPS, with a CA of its own (not the appliance's), counting blob uploads.
type siteRegistry struct {
	addr   string
	caFile string
	// uploads counts requests that start, send or finish a blob upload.
	uploads atomic.Int64
	// commits counts blob uploads finished with 201.
	commits atomic.Int64
	// failAfter, when > 0, makes the registry refuse blob commits once
	// that many have succeeded.
	failAfter atomic.Int64
}

func startSiteRegistry(t *testing.T) *siteRegistry {
	t.Helper()
	siteDir := t.TempDir()
	if _, err := certs.Generate(siteDir, []string{"127.0.0.1", "localhost"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	cert, err := certs.LoadServerCertificate(siteDir)
	if err != nil {
		t.Fatal(err)
	}
	sr := &siteRegistry{caFile: filepath.Join(certs.CertsDir(siteDir), certs.CAFile)}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/uploads") && r.Method != http.MethodGet && r.Method != http.MethodHead {
			sr.uploads.Add(1)
			if r.Method == http.MethodPut {
				if n := sr.failAfter.Load(); n > 0 && sr.commits.Load() >= n {
					http.Error(w, `{"errors":[{"code":"DENIED","message":"quota"}]}`, http.StatusForbidden)
					return
				}
				rec := &statusRecorder{ResponseWriter: w}
				reg.ServeHTTP(rec, r)
				if rec.status == http.StatusCreated {
					sr.commits.Add(1)
				}
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	sr.addr = strings.TrimPrefix(srv.URL, "https://")
	return sr
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// pushWith pushes dir's images to to, trusting dir's trust store.
func pushWith(t *testing.T, dir, to string, progress io.Writer) ([]PushedImage, error) {
	t.Helper()
	store, err := certs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return PushImages(context.Background(), PushOptions{
		Dir: dir, To: to, Concurrency: 3, Transport: store.Transport(),
		Keychain: authn.NewMultiKeychain(), Progress: progress,
	})
}

// TestPushImages pushes a test layout into a site registry whose CA is
// imported with certs.Import, checks every image arrives with its digest and
// all its platforms, and that a second run uploads no blob.
func TestPushImages(t *testing.T) {
	dir := t.TempDir()
	images := writeTestLayout(t, filepath.Join(dir, ImagesDir), 32<<10)
	site := startSiteRegistry(t)
	to := site.addr + "/site/mirror"

	// Before the site's CA is imported, the registry is not trusted.
	if err := certs.Refresh(dir, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pushWith(t, dir, to, nil); err == nil || !strings.Contains(err.Error(), "x509") {
		t.Fatalf("push without the site CA: got %v, want an x509 error", err)
	}
	if n := site.uploads.Load(); n != 0 {
		t.Fatalf("push without the site CA uploaded %d times", n)
	}

	if _, err := certs.Import(dir, []string{site.caFile}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	pushed, err := pushWith(t, dir, to, &progress)
	if err != nil {
		t.Fatalf("push: %v\n%s", err, progress.String())
	}
	if len(pushed) != len(images) {
		t.Fatalf("pushed %d images, want %d", len(pushed), len(images))
	}
	if !strings.Contains(progress.String(), "[1/3] push docker.io/library/testapp:1.0 -> "+to+"/docker.io/library/testapp:1.0 (index of 2 manifests)") {
		t.Errorf("progress lines:\n%s", progress.String())
	}
	if site.commits.Load() == 0 {
		t.Fatal("no blob was uploaded")
	}

	store, err := certs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, img := range images {
		target := to + "/" + img.repo + ":" + img.tag
		if pushed[i].Target != target || pushed[i].Digest != img.digest {
			t.Errorf("pushed %+v, want %s at %s", pushed[i], img.digest, target)
		}
		ref, err := name.ParseReference(target)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Get(ref, remote.WithTransport(store.Transport()))
		if err != nil {
			t.Fatal(err)
		}
		if desc.Digest != img.digest {
			t.Errorf("%s: registry has %s, want %s", target, desc.Digest, img.digest)
		}
		// Every platform and blob is there and matches its digest.
		if img.index {
			idx, err := desc.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			if err := readIndex(idx); err != nil {
				t.Errorf("%s: %v", target, err)
			}
			im, _ := idx.IndexManifest()
			if len(im.Manifests) != 2 {
				t.Errorf("%s: %d platforms, want 2", target, len(im.Manifests))
			}
		} else if err := readImage(desc); err != nil {
			t.Errorf("%s: %v", target, err)
		}
	}

	// A second run finds everything there.
	site.uploads.Store(0)
	if _, err := pushWith(t, dir, to, nil); err != nil {
		t.Fatal(err)
	}
	if n := site.uploads.Load(); n != 0 {
		t.Errorf("second push made %d blob upload requests, want 0", n)
	}
}

func readImage(desc *remote.Descriptor) error {
	img, err := desc.Image()
	if err != nil {
		return err
	}
	return drainLayers(img)
}

// drainLayers reads every layer of img to the end.
func drainLayers(img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// TestPushImagesResumes interrupts a push (the registry starts refusing
// uploads) and checks the next run uploads only what is missing.
func TestPushImagesResumes(t *testing.T) {
	dir := t.TempDir()
	writeTestLayout(t, filepath.Join(dir, ImagesDir), 16<<10)
	site := startSiteRegistry(t)
	if _, err := certs.Import(dir, []string{site.caFile}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	total := distinctBlobs(t, filepath.Join(dir, ImagesDir))

	site.failAfter.Store(3)
	if _, err := pushWith(t, dir, site.addr, nil); err == nil {
		t.Fatal("push succeeded although the registry refused uploads")
	}
	first := site.commits.Load()
	site.failAfter.Store(0)
	site.commits.Store(0)
	if _, err := pushWith(t, dir, site.addr, nil); err != nil {
		t.Fatal(err)
	}
	second := site.commits.Load()
	if first == 0 || first+second != int64(total) {
		t.Errorf("uploads: %d before the interruption, %d after; want them to add up to the %d distinct blobs", first, second, total)
	}
}

// distinctBlobs counts the configs and layers of the layout at dir.
func distinctBlobs(t *testing.T, dir string) int {
	t.Helper()
	li, err := loadLayout(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[v1.Hash]bool{}
	for _, r := range li.repos {
		for h := range r.blobs {
			seen[h] = true
		}
	}
	return len(seen)
}

func TestPushImagesRefusesPlainHTTP(t *testing.T) {
	dir := t.TempDir()
	writeTestLayout(t, filepath.Join(dir, ImagesDir), 1024)
	if err := certs.Refresh(dir, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		registry.New().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	_, err := pushWith(t, dir, strings.TrimPrefix(srv.URL, "http://"), nil)
	if err == nil || !strings.Contains(err.Error(), "HTTPS only") {
		t.Errorf("got %v, want a refusal of plain HTTP", err)
	}
	if hits.Load() != 0 {
		t.Errorf("the plain HTTP registry got %d requests", hits.Load())
	}
	for _, bad := range []string{"", "http://reg.corp", "reg.corp/UPPER", "https://"} {
		if _, err := ParsePushTarget(bad); err == nil {
			t.Errorf("ParsePushTarget(%q): got no error", bad)
		}
	}
	if got, err := ParsePushTarget("https://reg.corp:5000/coder/"); err != nil || got != "reg.corp:5000/coder" {
		t.Errorf("ParsePushTarget: got %q, %v", got, err)
	}
}
