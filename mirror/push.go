package mirror

import (
	"airgapcoder/internal/bytesize"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"
)

// DefaultStallTimeout is how long a transfer to the registry may move no
// byte before PushImages gives up on it.
const DefaultStallTimeout = 60 * time.Second

// PushOptions configure PushImages.
type PushOptions struct {
	// Dir is the appliance folder; the images are read from the OCI layout
	// at Dir/images unless ImagesDir is set.
	Dir string
	// ImagesDir overrides where the OCI layout is read from; empty means
	// Dir/images.
	ImagesDir string
	// To is the site registry and an optional path prefix,
	// "REGISTRY[/PREFIX]" such as "harbor.corp/coder". An image HOST/PATH:TAG
	// is written to TO/HOST/PATH:TAG (see ImageRef.Repository). Required.
	To string
	// Concurrency is how many blobs are uploaded at once; zero means 4.
	Concurrency int
	// Transport carries every request; it decides which CAs are trusted
	// (use certs.Store.Transport). Required: there is no default trust.
	// Plain HTTP is refused whatever the transport.
	Transport http.RoundTripper
	// Keychain finds credentials for the registry; nil means
	// authn.DefaultKeychain (the docker config file, DOCKER_CONFIG).
	Keychain authn.Keychain
	// Progress receives one plain line per image and step, and a byte
	// count every ProgressInterval while an image uploads; nil discards.
	Progress io.Writer
	// ProgressInterval is the time between byte counts; zero means 5 s.
	ProgressInterval time.Duration
	// StallTimeout fails the push when a transfer to the registry moves no
	// byte for this long (the registry stopped reading an upload, or
	// stopped answering); zero means DefaultStallTimeout. The error wraps
	// a *StallError naming the blob. Blobs uploaded before are kept, so
	// running the push again continues where it stopped.
	StallTimeout time.Duration
}

// StallError is a transfer to the registry in which no byte moved for
// PushOptions.StallTimeout: an upload the registry stopped reading, or a
// request it stopped answering.
type StallError struct {
	// Kind is "blob", "manifest", or "request" for any other request.
	Kind string
	// Name is the blob's digest, the manifest's digest or tag, or the
	// other request's method and path.
	Name string
	// Registry is the host[:port] the request went to.
	Registry string
	// Timeout is how long nothing moved.
	Timeout time.Duration
}

func (e *StallError) Error() string {
	return fmt.Sprintf("%s %s: no progress for %s: registry %s stopped reading or answering", e.Kind, e.Name, e.Timeout, e.Registry)
}

// PushedImage is one image PushImages wrote.
type PushedImage struct {
	// Source is the image's original reference.
	Source ImageRef
	// Target is where it was written.
	Target string
	// Digest is its manifest or index digest, the same in both places.
	Digest v1.Hash
}

// PushImages copies every image of the layout at Dir/images, with all its
// platforms (an index stays an index, digests do not change), to the
// registry To. Blobs and manifests the registry already has are skipped
// (a HEAD first), so running it again after an interruption continues where
// it stopped, and a second complete run uploads nothing. After each image it
// checks that the registry reports the source digest.
//
// A transfer that moves no byte for StallTimeout (an upload the registry
// stopped reading, a request it stopped answering) fails the push with an
// error naming the image, and wrapping a *StallError that names the blob and
// the registry.
func PushImages(ctx context.Context, opts PushOptions) ([]PushedImage, error) {
	pushed, err := pushImages(ctx, opts)
	if err != nil {
		return pushed, fmt.Errorf("mirror: push images: %w", err)
	}
	return pushed, nil
}

func pushImages(ctx context.Context, opts PushOptions) ([]PushedImage, error) {
	to, err := ParsePushTarget(opts.To)
	if err != nil {
		return nil, err
	}
	if opts.Dir == "" && opts.ImagesDir == "" {
		return nil, errors.New("no folder given")
	}
	if opts.Transport == nil {
		return nil, errors.New("no transport: load the trust store (certs.Load) and pass its transport")
	}
	jobs := opts.Concurrency
	if jobs <= 0 {
		jobs = 4
	}
	keychain := opts.Keychain
	if keychain == nil {
		keychain = authn.DefaultKeychain
	}
	out := opts.Progress
	if out == nil {
		out = io.Discard
	}
	interval := opts.ProgressInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	guard := &stallGuard{rt: httpsOnly{opts.Transport}, timeout: opts.StallTimeout}
	if guard.timeout <= 0 {
		guard.timeout = DefaultStallTimeout
	}

	dir := opts.ImagesDir
	if dir == "" {
		dir = filepath.Join(opts.Dir, ImagesDir)
	}
	images, skipped, err := ReadLayoutImages(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no image layout at %s (want an installed bundle's folder): %w", dir, err)
	}
	if err != nil {
		return nil, err
	}
	for _, s := range skipped {
		fmt.Fprintf(out, "skip %s\n", s)
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("open image layout: %w", err)
	}
	root, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("open image layout: %w", err)
	}

	base := []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(guard),
		remote.WithAuthFromKeychain(keychain),
		remote.WithJobs(jobs),
	}
	// One pusher for the whole run: it remembers the blobs it wrote to
	// each repository, and its registry credentials.
	pusher, err := remote.NewPusher(base...)
	if err != nil {
		return nil, err
	}
	var done []PushedImage
	for i, img := range images {
		target, err := pushTarget(to, img)
		if err != nil {
			return done, err
		}
		var t remote.Taggable
		kind := "image"
		switch mt := img.Descriptor.MediaType; {
		case mt.IsIndex():
			idx, err := root.ImageIndex(img.Descriptor.Digest)
			if err != nil {
				return done, fmt.Errorf("%s: %w", img.Ref, err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				return done, fmt.Errorf("%s: %w", img.Ref, err)
			}
			t, kind = idx, fmt.Sprintf("index of %d manifests", len(im.Manifests))
		case mt.IsImage():
			if t, err = root.Image(img.Descriptor.Digest); err != nil {
				return done, fmt.Errorf("%s: %w", img.Ref, err)
			}
		default:
			return done, fmt.Errorf("%s: unsupported media type %s", img.Ref, mt)
		}

		fmt.Fprintf(out, "[%d/%d] push %s -> %s (%s)\n", i+1, len(images), img.Ref, target, kind)
		start := time.Now()
		if err := pushOne(ctx, pusher, guard, target, t, jobs, out, interval); err != nil {
			var stall *StallError
			if errors.As(err, &stall) {
				return done, fmt.Errorf("push %s to %s: %w (what was uploaded stays: run push-images again to resume)", img.Ref, target, err)
			}
			return done, fmt.Errorf("push %s to %s: %w", img.Ref, target, err)
		}
		desc, err := remote.Head(target, base...)
		if err != nil {
			return done, fmt.Errorf("check %s: %w", target, err)
		}
		if desc.Digest != img.Descriptor.Digest {
			return done, fmt.Errorf("check %s: the registry reports digest %s, the bundle has %s", target, desc.Digest, img.Descriptor.Digest)
		}
		fmt.Fprintf(out, "[%d/%d] done %s %s in %s\n", i+1, len(images), target, desc.Digest, time.Since(start).Round(time.Millisecond))
		done = append(done, PushedImage{Source: img.Ref, Target: target.String(), Digest: desc.Digest})
	}
	return done, nil
}

// pushOne writes t to target: first every blob it references, jobs at a
// time, each under its own stall watch (so a stall names the blob), then
// the manifests. A blob the registry has is skipped after a HEAD.
func pushOne(ctx context.Context, p *remote.Pusher, g *stallGuard, target name.Reference, t remote.Taggable, jobs int, out io.Writer, interval time.Duration) error {
	blobs, err := taggableBlobs(t)
	if err != nil {
		return err
	}
	prog := &pushProgress{}
	for _, b := range blobs {
		prog.total += b.size
	}
	stop := prog.report(out, interval)
	eg, egctx := errgroup.WithContext(ctx)
	eg.SetLimit(jobs)
	for _, b := range blobs {
		eg.Go(func() error { return g.upload(egctx, p, target.Context(), b, prog) })
	}
	err = eg.Wait()
	stop()
	if err != nil {
		return err
	}
	return p.Push(ctx, target, t)
}

// blob is one config or layer to upload.
type blob struct {
	layer  v1.Layer
	digest v1.Hash
	size   int64
}

// taggableBlobs lists the configs and layers of an image, or of every image
// of an index (nested indexes included), each once, in order.
func taggableBlobs(t remote.Taggable) ([]blob, error) {
	var blobs []blob
	seen := map[v1.Hash]bool{}
	add := func(l v1.Layer) error {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		if !seen[d] {
			seen[d] = true
			blobs = append(blobs, blob{layer: l, digest: d, size: size})
		}
		return nil
	}
	var walk func(d partial.Describable) error
	walk = func(d partial.Describable) error {
		switch d := d.(type) {
		case v1.ImageIndex:
			children, err := partial.Manifests(d)
			if err != nil {
				return err
			}
			for _, c := range children {
				if err := walk(c); err != nil {
					return err
				}
			}
		case v1.Image:
			layers, err := d.Layers()
			if err != nil {
				return err
			}
			if mt, err := d.MediaType(); err != nil || !mt.IsSchema1() {
				cl, err := partial.ConfigLayer(d)
				if err != nil {
					return err
				}
				layers = append([]v1.Layer{cl}, layers...)
			}
			for _, l := range layers {
				if err := add(l); err != nil {
					return err
				}
			}
		case v1.Layer:
			return add(d)
		}
		return nil
	}
	d, ok := t.(partial.Describable)
	if !ok {
		return nil, fmt.Errorf("unsupported %T", t)
	}
	return blobs, walk(d)
}

// pushProgress counts the bytes of one image's blobs checked or uploaded.
type pushProgress struct {
	total int64
	done  atomic.Int64
}

// report prints the count every interval until stop is called.
func (p *pushProgress) report(out io.Writer, interval time.Duration) (stop func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				fmt.Fprintf(out, "  %s of %s checked or uploaded\n", bytesize.Format(min(p.done.Load(), p.total)), bytesize.Format(p.total))
			}
		}
	}()
	return func() {
		close(quit)
		<-finished
	}
}

// stallGuard is the transport of every registry request. It fails a request
// when no byte of it moved for timeout: no byte of the upload taken by the
// connection, no response, or no byte of the response body. The requests
// of one blob upload (HEAD, POST, PATCH, PUT) share the blob's watch, which
// rides in their context (see upload); any other request is watched on its
// own, named after its URL.
type stallGuard struct {
	rt      http.RoundTripper
	timeout time.Duration
}

// watchKey is the context key of a blob's *watch.
type watchKey struct{}

// upload writes one blob through p under a watch that names it: a stall
// cancels the blob's requests and upload returns the *StallError.
func (g *stallGuard) upload(ctx context.Context, p *remote.Pusher, repo name.Repository, b blob, prog *pushProgress) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := g.watch(&StallError{Kind: "blob", Name: b.digest.String(), Registry: repo.RegistryStr()}, cancel, prog)
	defer w.stop()
	err := p.Upload(context.WithValue(ctx, watchKey{}, w), repo, b.layer)
	if stall := w.stalled(); stall != nil {
		return stall
	}
	if err != nil {
		return fmt.Errorf("blob %s: %w", b.digest, err)
	}
	// A blob the registry had counts as checked; one sent counts as it goes.
	prog.done.Add(max(0, b.size-w.sent.Load()))
	return nil
}

func (g *stallGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	w, _ := req.Context().Value(watchKey{}).(*watch)
	own := w == nil
	if own {
		ctx, cancel := context.WithCancelCause(req.Context())
		w = g.watch(describeRequest(req), cancel, nil)
		req = req.WithContext(ctx)
	} else {
		req = req.WithContext(req.Context()) // a copy: the caller's request is not changed
	}
	finish := func() {
		w.end()
		if own {
			w.stop()
			w.cancel(nil)
		}
	}
	w.begin(req.URL.Host)
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &watchedBody{rc: req.Body, w: w, upload: true}
		if getBody := req.GetBody; getBody != nil {
			req.GetBody = func() (io.ReadCloser, error) {
				b, err := getBody()
				if err != nil || b == http.NoBody {
					return b, err
				}
				return &watchedBody{rc: b, w: w, upload: true}, nil
			}
		}
	}
	resp, err := g.rt.RoundTrip(req)
	if err != nil {
		finish()
		if stall := w.stalled(); stall != nil {
			return nil, stall
		}
		return nil, err
	}
	w.moved(0, false)
	resp.Body = &watchedBody{rc: resp.Body, w: w, done: finish}
	return resp, nil
}

// describeRequest names what a request outside a blob upload transfers.
func describeRequest(r *http.Request) *StallError {
	e := &StallError{Kind: "request", Name: r.Method + " " + r.URL.Path, Registry: r.URL.Host}
	p := r.URL.Path
	switch i, j := strings.LastIndex(p, "/blobs/"), strings.LastIndex(p, "/manifests/"); {
	case r.URL.Query().Get("digest") != "":
		e.Kind, e.Name = "blob", r.URL.Query().Get("digest")
	case i >= 0 && !strings.Contains(p[i:], "/uploads"):
		e.Kind, e.Name = "blob", path.Base(p)
	case j >= 0:
		e.Kind, e.Name = "manifest", p[j+len("/manifests/"):]
	}
	return e
}

// watch is the progress of a blob upload or a single request: a timer that
// runs while a request is in flight and cancels the context when nothing
// moved for the timeout.
type watch struct {
	timeout time.Duration
	cancel  context.CancelCauseFunc
	prog    *pushProgress // counts upload bytes; nil outside blob uploads
	start   time.Time
	last    atomic.Int64 // time.Since(start) when a byte last moved
	sent    atomic.Int64 // upload bytes taken by the connection

	mu     sync.Mutex
	what   StallError // Registry follows the requests
	active int        // requests in flight
	armed  bool
	done   bool
	timer  *time.Timer
	err    *StallError // the stall, once it happened
}

func (g *stallGuard) watch(what *StallError, cancel context.CancelCauseFunc, prog *pushProgress) *watch {
	w := &watch{timeout: g.timeout, cancel: cancel, prog: prog, start: time.Now(), what: *what}
	w.what.Timeout = g.timeout
	return w
}

// begin starts a request to host.
func (w *watch) begin(host string) {
	w.moved(0, false)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.active++
	if host != "" {
		w.what.Registry = host
	}
	if w.armed || w.done {
		return
	}
	w.armed = true
	if w.timer == nil {
		w.timer = time.AfterFunc(w.timeout, w.check)
	} else {
		w.timer.Reset(w.timeout)
	}
}

// end finishes a request.
func (w *watch) end() {
	w.moved(0, false)
	w.mu.Lock()
	w.active--
	w.mu.Unlock()
}

// moved records progress: n bytes, of the upload when upload is set.
func (w *watch) moved(n int, upload bool) {
	w.last.Store(int64(time.Since(w.start)))
	if upload && n > 0 {
		w.sent.Add(int64(n))
		if w.prog != nil {
			w.prog.done.Add(int64(n))
		}
	}
}

// check runs when the timer fires: it cancels the context if a request is
// in flight and nothing moved for the timeout, else sets the timer again.
func (w *watch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	if w.done || w.active == 0 {
		return
	}
	idle := time.Since(w.start) - time.Duration(w.last.Load())
	if idle < w.timeout {
		w.armed = true
		w.timer.Reset(w.timeout - idle)
		return
	}
	stall := w.what
	w.err, w.done = &stall, true
	w.cancel(w.err)
}

// stalled returns the stall, or nil.
func (w *watch) stalled() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		return nil
	}
	return w.err
}

// stop ends the watch.
func (w *watch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// watchedBody reports the bytes read through it to its watch: an upload
// body as the connection takes it, or a response body as it arrives. A
// response body calls done once, at its end or when closed.
type watchedBody struct {
	rc     io.ReadCloser
	w      *watch
	upload bool
	done   func()
	once   sync.Once
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.w.moved(n, b.upload)
	}
	if err != nil && err != io.EOF {
		if stall := b.w.stalled(); stall != nil {
			err = stall
		}
	}
	if err != nil && b.done != nil {
		b.once.Do(b.done)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	err := b.rc.Close()
	if b.done != nil {
		b.once.Do(b.done)
	}
	return err
}

// ParsePushTarget checks "REGISTRY[/PREFIX]" (an "https://" in front is
// dropped; "http://" is refused) and returns it without a trailing slash.
func ParsePushTarget(s string) (string, error) {
	to := strings.TrimSuffix(strings.TrimPrefix(s, "https://"), "/")
	if strings.HasPrefix(to, "http://") {
		return "", fmt.Errorf("push target %q: registries are reached over HTTPS only", s)
	}
	if to == "" || strings.Contains(to, "://") {
		return "", fmt.Errorf("push target %q: want REGISTRY[/PREFIX], such as registry.corp:5000/coder", s)
	}
	if _, err := name.NewRepository(to+"/x", name.StrictValidation); err != nil {
		return "", fmt.Errorf("push target %q: %w", s, err)
	}
	return to, nil
}

func pushTarget(to string, img LayoutImage) (name.Reference, error) {
	repo := to + "/" + img.Ref.Repository()
	var ref name.Reference
	var err error
	if img.Ref.Tag != "" {
		ref, err = name.NewTag(repo+":"+img.Ref.Tag, name.StrictValidation)
	} else {
		ref, err = name.NewDigest(repo+"@"+img.Descriptor.Digest.String(), name.StrictValidation)
	}
	if err != nil {
		return nil, fmt.Errorf("target of %s: %w", img.Ref, err)
	}
	return ref, nil
}

// httpsOnly refuses plain HTTP. go-containerregistry falls back to http://
// for registries on loopback and private addresses when https fails; the
// appliance never does.
type httpsOnly struct{ rt http.RoundTripper }

func (h httpsOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, fmt.Errorf("refusing plain HTTP to %s: registries are reached over HTTPS only", r.URL.Host)
	}
	return h.rt.RoundTrip(r)
}
