package builder

import (
	"context"
	"errors"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"airgapcoder/bundle"
)

// Image layers are the bulk of most bundles, and the build does not wait
// for them before it writes the bundle: an image manifest gives each layer's
// size and sha256, which is all the bundle's manifest needs, so bundle.Write
// writes the manifest and whatever comes before a layer in the stream while
// the layers download, and waits for each when the stream reaches it
// (bundle.PendingBlob). The layers download in the stream's order, so the
// writer follows close behind the downloads; the bundle is ready shortly
// after the last byte arrives instead of a whole second pass later.
//
// A layer is left for later once its image is resolved (every manifest,
// config and signature fetched and checked); until then nothing starts, so
// the small requests never queue behind the large ones. A delta build
// (Options.Against) does not download at all a layer the installed release
// has: the delta leaves it out, and the site has its bytes.

// errInstalled is a deferred layer's error when a delta build leaves it to
// the installed release.
var errInstalled = errors.New("not downloaded: the release the delta is built against has it")

// laterLayer is one image layer downloaded while the bundle is written.
type laterLayer struct {
	rel  string // its payload path
	repo *imageRepo
	desc v1.Descriptor

	done chan struct{} // closed when blob or err is set
	blob cachedBlob
	err  error
}

// deferrable says whether a layer can be left to download while the bundle
// is written: its descriptor gives size and sha256, and it is compressed,
// so the bundle stores it as it is (no hash of its content needed before).
func deferrable(desc v1.Descriptor) bool {
	return desc.Size > 0 && desc.Digest.Algorithm == "sha256" && compressedMediaType(desc)
}

// compressedMediaType says whether a blob's media type is a compressed
// layer's (gzip or zstd), which the bundle stores as it is.
func compressedMediaType(desc v1.Descriptor) bool {
	mt := string(desc.MediaType)
	return strings.Contains(mt, "gzip") || strings.Contains(mt, "zstd")
}

// deferImageBlob lists a layer to download later, once however many images
// share it.
func (b *builder) deferImageBlob(r *imageRepo, desc v1.Descriptor) error {
	return b.stageImageFile(desc.Digest.String(), func(rel string) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.layers = append(b.layers, &laterLayer{rel: rel, repo: r, desc: desc, done: make(chan struct{})})
		return nil
	})
}

// downloadLayers starts the deferred layers' downloads in the order of their
// payload paths, the order in which bundle.Write wants them, through the
// build's download slots: a slot is taken in that order before each
// download starts. A layer the cache holds takes no slot (it is hashed
// again, see fetchBlob). The first failure cancels the build's later work,
// and so the write.
func (b *builder) downloadLayers() {
	b.mu.Lock()
	layers := slices.Clone(b.layers)
	b.mu.Unlock()
	slices.SortFunc(layers, func(x, y *laterLayer) int { return strings.Compare(x.rel, y.rel) })
	var installed bundle.Contents // what the delta leaves to the installed release
	if b.opts.Against != nil {
		installed = b.opts.Against.Contents()
	}
	ctx := b.laterCtx
	b.later.Go(func() error {
		for _, l := range layers {
			if _, ok := installed.Path(l.desc.Size, l.desc.Digest.Hex); ok {
				l.err = errInstalled // bundle.Write leaves it out: it never waits
				close(l.done)
				continue
			}
			_, hit := b.cache.stat(l.desc.Digest.String())
			if !hit {
				if err := b.sem.Acquire(ctx, 1); err != nil {
					return err
				}
			}
			b.later.Go(func() error {
				if !hit {
					defer b.sem.Release(1)
				}
				defer close(l.done)
				l.blob, l.err = b.fetchImageBlob(ctx, l.repo, l.desc, !hit)
				return l.err
			})
		}
		return nil
	})
}

// pendingLayers are the deferred layers as bundle.Write takes them.
func (b *builder) pendingLayers() []bundle.PendingBlob {
	b.mu.Lock()
	defer b.mu.Unlock()
	pending := make([]bundle.PendingBlob, len(b.layers))
	for i, l := range b.layers {
		pending[i] = bundle.PendingBlob{Path: l.rel, Size: l.desc.Size, Wait: l.wait}
	}
	return pending
}

// wait returns the layer's cache file once it is downloaded and checked.
func (l *laterLayer) wait(ctx context.Context) (string, error) {
	select {
	case <-l.done:
		return l.blob.Path, l.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}
