package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

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
		remote.WithTransport(httpsOnly{opts.Transport}),
		remote.WithAuthFromKeychain(keychain),
		remote.WithJobs(jobs),
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
		updates := make(chan v1.Update, 64)
		reported := make(chan struct{})
		go func() {
			defer close(reported)
			reportProgress(out, updates, interval)
		}()
		err = remote.Push(target, t, append(base, remote.WithProgress(updates))...)
		select {
		case <-reported: // Push closes updates when it is done
		case <-time.After(time.Second): // it failed before taking the channel
		}
		if err != nil {
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

// reportProgress prints the byte count of an upload at most every interval,
// and drains updates until the writer closes the channel.
func reportProgress(out io.Writer, updates <-chan v1.Update, interval time.Duration) {
	var last v1.Update
	next := time.Now().Add(interval)
	for u := range updates {
		if u.Error != nil {
			continue
		}
		last = u
		if time.Now().After(next) {
			fmt.Fprintf(out, "  %s of %s checked or uploaded\n", formatBytes(last.Complete), formatBytes(last.Total))
			next = time.Now().Add(interval)
		}
	}
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
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
