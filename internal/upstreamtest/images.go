package upstreamtest

import (
	"fmt"
	"maps"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var zeroTime time.Time

// Image is a multi-platform image the registry holds.
type Image struct {
	// Ref is how bundle.yaml names it, such as
	// "docker.io/library/testbase:1"; the registry holds it under the
	// same repository path ("library/testbase").
	Ref string
	// Repository is the repository path on the server.
	Repository string
	// Tag is its tag.
	Tag string
	// Digest is the index's digest.
	Digest v1.Hash
	// Index is the image index.
	Index v1.ImageIndex
	// Platforms maps "os/arch" to that platform's manifest digest.
	Platforms map[string]v1.Hash
}

// Layers returns every layer digest of Images, with how many images and
// platforms hold it.
func (u *Upstream) Layers() (map[v1.Hash]int, error) {
	seen := map[v1.Hash]int{}
	for _, img := range u.Images {
		for _, d := range img.Platforms {
			im, err := img.Index.Image(d)
			if err != nil {
				return nil, err
			}
			layers, err := im.Layers()
			if err != nil {
				return nil, err
			}
			for _, l := range layers {
				h, err := l.Digest()
				if err != nil {
					return nil, err
				}
				seen[h]++
			}
		}
	}
	return seen, nil
}

// SharedLayers returns the layer digests that more than one of Images, or
// more than one platform, holds.
func (u *Upstream) SharedLayers() ([]v1.Hash, error) {
	seen, err := u.Layers()
	if err != nil {
		return nil, err
	}
	var shared []v1.Hash
	for h, n := range seen {
		if n > 1 {
			shared = append(shared, h)
		}
	}
	return shared, nil
}

// setupImages builds two images for every configured platform: "base"
// (docker.io/library/testbase:1) and "tool" (images.test/team/tool:2).
// Per platform they share a base layer, and every platform of both
// shares one platform-independent "data" layer. The images are pushed
// to the in-memory registry through its handler, without the network,
// and so is the workspace image when Options.WorkspaceImage asks for it.
func (u *Upstream) setupImages(mux *http.ServeMux) error {
	reg := registry.New(registry.Logger(nopLogger()), registry.WithReferrersSupport(true))
	mux.Handle("/v2/", reg)
	push := remote.WithTransport(handlerTransport{reg})

	rnd := rand.New(rand.NewSource(1))
	layer := func() (v1.Layer, error) {
		return random.Layer(u.opts.LayerSize, types.OCILayer, random.WithSource(rnd))
	}
	data, err := layer()
	if err != nil {
		return err
	}
	type build struct {
		ref, repo, tag string
		attest         bool
		perPlatform    map[string][]v1.Layer
	}
	images := []*build{
		{ref: "docker.io/library/testbase:1", repo: "library/testbase", tag: "1", perPlatform: map[string][]v1.Layer{}},
		{ref: "images.test/team/tool:2", repo: "team/tool", tag: "2", attest: true, perPlatform: map[string][]v1.Layer{}},
	}
	for _, pl := range u.opts.ImagePlatforms {
		base, err := layer()
		if err != nil {
			return err
		}
		for _, b := range images {
			own, err := layer()
			if err != nil {
				return err
			}
			b.perPlatform[pl] = []v1.Layer{base, data, own}
		}
	}
	for _, b := range images {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		platforms := map[string]v1.Hash{}
		for _, pl := range u.opts.ImagePlatforms {
			osName, arch, _ := strings.Cut(pl, "/")
			img, err := mutate.AppendLayers(mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1), b.perPlatform[pl]...)
			if err != nil {
				return err
			}
			cf, err := img.ConfigFile()
			if err != nil {
				return err
			}
			cf = cf.DeepCopy()
			cf.OS, cf.Architecture = osName, arch
			cf.Config.Cmd = []string{"/bin/" + b.repo}
			if img, err = mutate.ConfigFile(img, cf); err != nil {
				return err
			}
			d, err := img.Digest()
			if err != nil {
				return err
			}
			platforms[pl] = d
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
				Add:        img,
				Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}},
			})
		}
		if b.attest {
			// What buildx adds: one attestation manifest per image,
			// platform unknown/unknown, tied to it by annotations.
			for _, pl := range u.opts.ImagePlatforms {
				att, err := attestation(pl, platforms[pl])
				if err != nil {
					return err
				}
				idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
					Add: att,
					Descriptor: v1.Descriptor{
						Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"},
						Annotations: map[string]string{
							"vnd.docker.reference.type":   "attestation-manifest",
							"vnd.docker.reference.digest": platforms[pl].String(),
						},
					},
				})
			}
		}
		ref, err := name.NewTag("images.test/"+b.repo+":"+b.tag, name.StrictValidation)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(ref, idx, push); err != nil {
			return fmt.Errorf("push %s: %w", b.ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		u.Images = append(u.Images, Image{Ref: b.ref, Repository: b.repo, Tag: b.tag, Digest: d, Index: idx, Platforms: platforms})
		if b.attest {
			u.artifactBlobs = map[v1.Hash]bool{}
			if u.Signed, err = signImage(u.Images[len(u.Images)-1], u.cosignKey, push, u.artifactBlobs); err != nil {
				return fmt.Errorf("sign %s: %w", b.ref, err)
			}
		}
	}
	if u.opts.WorkspaceImage {
		return u.setupWorkspace(push)
	}
	return nil
}

// attestation builds an in-toto attestation manifest for the image of
// platform pl with digest d.
func attestation(pl string, d v1.Hash) (v1.Image, error) {
	statement := fmt.Sprintf(`{"_type":"https://in-toto.io/Statement/v0.1","predicateType":"https://slsa.dev/provenance/v0.2","subject":[{"name":"%s","digest":{"sha256":"%s"}}]}`, pl, d.Hex)
	layer := static.NewLayer([]byte(statement), "application/vnd.in-toto+json")
	img, err := mutate.AppendLayers(mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "unknown", "unknown"
	return mutate.ConfigFile(img, cf)
}

// Blobs returns every digest the indexes of Images reach: indexes,
// manifests (attestations included), configs and layers, and those of the
// signatures and SBOM of Signed.
func (u *Upstream) Blobs() (map[v1.Hash]bool, error) {
	all := maps.Clone(u.artifactBlobs)
	if all == nil {
		all = map[v1.Hash]bool{}
	}
	for _, img := range u.Images {
		all[img.Digest] = true
		im, err := img.Index.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range im.Manifests {
			all[d.Digest] = true
			child, err := img.Index.Image(d.Digest)
			if err != nil {
				return nil, err
			}
			m, err := child.Manifest()
			if err != nil {
				return nil, err
			}
			all[m.Config.Digest] = true
			for _, l := range m.Layers {
				all[l.Digest] = true
			}
		}
	}
	return all, nil
}

// handlerTransport serves requests with a handler in-process.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	if r.Body == nil {
		r = r.Clone(r.Context())
		r.Body = http.NoBody // as a server hands it to handlers
	}
	t.h.ServeHTTP(rec, r)
	resp := rec.Result()
	resp.Request = r // clients resolve Location headers against it
	return resp, nil
}
