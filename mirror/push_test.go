package mirror

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"airgapcoder/certs"
	"airgapcoder/internal/testtier"
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
	// stall, when set, makes the registry stall one blob transfer.
	stall atomic.Pointer[stallPlan]
}

// stallPlan makes the site registry stall the first blob transfer it
// matches, until the client goes away or the test ends.
type stallPlan struct {
	// readBody stops reading the body of the first layer upload (a PATCH
	// of more than 4 KiB) after 1 KiB; otherwise the registry stops
	// answering the first blob commit (PUT ?digest=).
	readBody bool
	once     sync.Once
	hit      chan struct{} // closed when the stall begins
	prefix   []byte        // readBody: what was read of the body
	digest   string        // !readBody: the blob whose commit is left unanswered
	release  chan struct{} // closed when the test ends
}

func newStallPlan(t *testing.T, readBody bool) *stallPlan {
	sp := &stallPlan{readBody: readBody, hit: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(sp.release) }) // before the server closes: it waits for its handlers
	return sp
}

// serve stalls r and reports true if r is the transfer to stall.
func (sp *stallPlan) serve(r *http.Request) bool {
	switch {
	case sp.readBody && r.Method == http.MethodPatch && r.ContentLength > 4<<10:
	case !sp.readBody && r.Method == http.MethodPut && r.URL.Query().Get("digest") != "":
	default:
		return false
	}
	first := false
	sp.once.Do(func() { first = true })
	if !first {
		return false
	}
	if sp.readBody {
		sp.prefix = make([]byte, 1<<10)
		n, _ := io.ReadFull(r.Body, sp.prefix)
		sp.prefix = sp.prefix[:n]
	} else {
		sp.digest = r.URL.Query().Get("digest")
	}
	close(sp.hit)
	select {
	case <-r.Context().Done():
	case <-sp.release:
	}
	return true
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
		if sp := sr.stall.Load(); sp != nil && sp.serve(r) {
			return
		}
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
	return pushOpts(t, dir, PushOptions{To: to, Progress: progress})
}

// pushOpts pushes dir's images with opts, trusting dir's trust store, three
// blobs at a time.
func pushOpts(t *testing.T, dir string, opts PushOptions) ([]PushedImage, error) {
	t.Helper()
	store, err := certs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	opts.Dir, opts.Concurrency, opts.Transport, opts.Keychain = dir, 3, store.Transport(), authn.NewMultiKeychain()
	return PushImages(context.Background(), opts)
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

// TestPushImagesStall: a registry that stops reading an upload, or stops
// answering, fails the push a stall timeout later, naming the image, the
// blob and the registry; the next run, against a well registry, uploads
// only what is missing.
func TestPushImagesStall(t *testing.T) {
	testtier.Heavy(t, "waits out 2 s stall timeouts in real time")
	const timeout = 2 * time.Second
	for _, tc := range []struct {
		name     string
		readBody bool
	}{
		{"stops reading the upload", true},
		{"stops answering the commit", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			images := writeTestLayout(t, filepath.Join(dir, ImagesDir), 32<<10)
			site := startSiteRegistry(t)
			if _, err := certs.Import(dir, []string{site.caFile}, certs.Options{}); err != nil {
				t.Fatal(err)
			}
			total := distinctBlobs(t, filepath.Join(dir, ImagesDir))
			plan := newStallPlan(t, tc.readBody)
			site.stall.Store(plan)

			start := time.Now()
			_, err := pushOpts(t, dir, PushOptions{To: site.addr, StallTimeout: timeout})
			elapsed := time.Since(start)
			select {
			case <-plan.hit:
			default:
				t.Fatalf("the registry never stalled; push: %v", err)
			}
			var stall *StallError
			if !errors.As(err, &stall) {
				t.Fatalf("push: got %v, want a *StallError", err)
			}
			if elapsed < timeout || elapsed > timeout+8*time.Second {
				t.Errorf("push failed after %s, want a little over %s", elapsed.Round(time.Millisecond), timeout)
			}
			want := plan.digest
			if tc.readBody {
				want = blobWithPrefix(t, filepath.Join(dir, ImagesDir), plan.prefix)
			}
			if stall.Kind != "blob" || stall.Name != want || stall.Registry != site.addr || stall.Timeout != timeout {
				t.Errorf("stall: got %+v, want blob %s at %s after %s", stall, want, site.addr, timeout)
			}
			for _, s := range []string{images[0].ref, want, site.addr, "no progress for 2s", "run push-images again"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %s", err, s)
				}
			}

			t.Logf("push: %v", err)
			first := site.commits.Load()
			site.stall.Store(nil)
			site.commits.Store(0)
			pushed, err := pushOpts(t, dir, PushOptions{To: site.addr, StallTimeout: timeout})
			if err != nil {
				t.Fatalf("second push: %v", err)
			}
			if len(pushed) != len(images) {
				t.Errorf("second push: %d images, want %d", len(pushed), len(images))
			}
			if second := site.commits.Load(); first+second != int64(total) {
				t.Errorf("uploads: %d before the stall, %d after; want them to add up to the %d distinct blobs", first, second, total)
			}
		})
	}
}

// blobWithPrefix returns the digest of the one blob of the layout at dir
// that starts with prefix.
func blobWithPrefix(t *testing.T, dir string, prefix []byte) string {
	t.Helper()
	if len(prefix) == 0 {
		t.Fatal("the registry read nothing of the upload it stalled")
	}
	entries, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.HasPrefix(b, prefix) {
			found = append(found, "sha256:"+e.Name())
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d blobs start with the stalled upload's first %d bytes, want 1", len(found), len(prefix))
	}
	return found[0]
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

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// dripReader yields one byte every gap, n in all, or stops at the end of ctx.
type dripReader struct {
	ctx context.Context
	n   int
	gap time.Duration
}

func (d *dripReader) Read(p []byte) (int, error) {
	if d.n == 0 {
		return 0, io.EOF
	}
	if d.gap < 0 { // never yields
		<-d.ctx.Done()
		return 0, d.ctx.Err()
	}
	select {
	case <-d.ctx.Done():
		return 0, d.ctx.Err()
	case <-time.After(d.gap):
	}
	d.n--
	p[0] = 'x'
	return 1, nil
}

// TestStallGuard: a transfer that keeps moving, however slowly, goes on
// past the timeout; one that stops fails a timeout later, in each phase
// (upload, answer, download), with a *StallError naming what it carried.
func TestStallGuard(t *testing.T) {
	const timeout = 300 * time.Millisecond
	digest := "sha256:" + strings.Repeat("ab", 32)
	// The registry reads the upload at uploadGap a byte, answers after
	// answerDelay, and sends its 10-byte answer at downloadGap a byte; a
	// negative gap never moves.
	registry := func(uploadGap, answerDelay, downloadGap time.Duration) roundTripFunc {
		return func(r *http.Request) (*http.Response, error) {
			b := make([]byte, 1)
			for {
				_, err := r.Body.Read(b)
				if err == io.EOF {
					break
				}
				if err != nil {
					return nil, err
				}
				if uploadGap < 0 {
					<-r.Context().Done()
					return nil, r.Context().Err()
				}
				select {
				case <-r.Context().Done():
					return nil, r.Context().Err()
				case <-time.After(uploadGap):
				}
			}
			select {
			case <-r.Context().Done():
				return nil, r.Context().Err()
			case <-time.After(answerDelay):
			}
			body := &dripReader{ctx: r.Context(), n: 10, gap: downloadGap}
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(body), Request: r}, nil
		}
	}
	tests := []struct {
		name                  string
		upload, answer, drips time.Duration
		stall                 bool
	}{
		{"slow but moving", timeout / 5, timeout / 2, timeout / 5, false},
		{"stops reading the upload", -1, 0, 0, true},
		{"stops answering", 0, time.Hour, 0, true},
		{"stops sending the answer", 0, 0, -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := &stallGuard{rt: registry(tt.upload, tt.answer, tt.drips), timeout: timeout}
			req, err := http.NewRequest(http.MethodPut, "https://reg.corp:5000/v2/x/blobs/uploads/1?digest="+digest, strings.NewReader(strings.Repeat("y", 10)))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			resp, err := g.RoundTrip(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			elapsed := time.Since(start)
			var stall *StallError
			switch {
			case !tt.stall && err != nil:
				t.Fatalf("got %v after %s, want the transfer to go on", err, elapsed)
			case !tt.stall && elapsed < 2*timeout:
				t.Fatalf("took %s: the test does not outlast the timeout", elapsed)
			case tt.stall && !errors.As(err, &stall):
				t.Fatalf("got %v after %s, want a *StallError", err, elapsed)
			case tt.stall && (elapsed < timeout || elapsed > timeout+time.Second):
				t.Fatalf("failed after %s, want a little over %s", elapsed, timeout)
			case tt.stall && *stall != StallError{Kind: "blob", Name: digest, Registry: "reg.corp:5000", Timeout: timeout}:
				t.Fatalf("got %+v", *stall)
			}
		})
	}
}
