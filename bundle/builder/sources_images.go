package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"airgapcoder/bundle"
	"airgapcoder/mirror"
)

// Images go into one OCI image layout under images/:
//
//	images/oci-layout           {"imageLayoutVersion":"1.0.0"}
//	images/index.json           one entry per bundle.yaml image, in file order,
//	                            annotated org.opencontainers.image.ref.name =
//	                            the full original reference
//	images/blobs/sha256/<hex>   manifests, configs and layers, each stored once
//
// For every image the requested platforms are taken from its index (or, for
// a single-platform image, its one manifest must be of the one requested
// platform). When the bundle takes every manifest of an index, the index is
// stored byte for byte and keeps its upstream digest; when it takes only
// some, a new index lists those (same order, same descriptors), and the
// manifest records the upstream digest beside the new one. Manifests,
// configs and layers are the registry's bytes, checked against their
// digests; nothing is recompressed, so every platform manifest keeps its
// upstream digest.
//
// Requests go through the build's HTTP client (proxies, trust, registries:
// overrides), authenticated with go-containerregistry's default keychain
// (docker's config.json and credential helpers) and its token flow. Blobs
// come through the cache: a blob any earlier build fetched is not fetched
// again, and one that two images share is fetched once.

// acceptManifests is what the build asks registries for.
var acceptManifests = strings.Join([]string{
	string(types.OCIImageIndex), string(types.OCIManifestSchema1),
	string(types.DockerManifestList), string(types.DockerManifestSchema2),
}, ", ")

// Annotations by which buildx ties an attestation manifest to the image
// it describes.
const (
	attestationType = "vnd.docker.reference.type"
	attestationRef  = "vnd.docker.reference.digest"
)

// maxManifestBytes bounds a manifest or index.
const maxManifestBytes = 4 << 20

// imageResult is one bundled image.
type imageResult struct {
	desc      v1.Descriptor // the index.json entry, without its annotation
	platforms []string
	upstream  string
	digests   []string // the top digest and every platform manifest's
	referrers []referrer
}

func (b *builder) fetchImages(ctx context.Context) error {
	if len(b.cfg.Images) == 0 {
		return nil
	}
	results := make([]imageResult, len(b.cfg.Images))
	g := newGroup(ctx)
	for i := range b.cfg.Images {
		src := b.cfg.Images[i]
		g.Go(func(ctx context.Context) error {
			r, err := b.fetchImage(ctx, src)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", src.Origin, src.Name, err)
			}
			results[i] = r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	b.downloadLayers()
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	b.mu.Lock()
	defer b.mu.Unlock()
	named := map[string]bool{}
	for i, src := range b.cfg.Images {
		d := results[i].desc
		d.Annotations = map[string]string{mirror.RefNameAnnotation: src.Name}
		index.Manifests = append(index.Manifests, d)
		img := bundle.Image{Ref: src.Name, Digest: d.Digest.String(), Platforms: results[i].platforms, Upstream: results[i].upstream}
		for _, rf := range results[i].referrers {
			img.Referrers = append(img.Referrers, rf.ImageReferrer)
		}
		b.comp.Images = append(b.comp.Images, img)
		b.imageDigests[src.Name] = results[i].digests
	}
	// Then what refers to them, each once, under its image's repository:
	// by digest, or by its cosign tag.
	for i, src := range b.cfg.Images {
		ir, err := mirror.ParseImageRef(src.Name)
		if err != nil {
			return err
		}
		for _, rf := range results[i].referrers {
			refName := ir.Host + "/" + ir.Path + "@" + rf.Digest
			if rf.Tag != "" {
				refName = ir.Host + "/" + ir.Path + ":" + rf.Tag
			}
			if named[refName] {
				continue
			}
			named[refName] = true
			h, err := v1.NewHash(rf.Digest)
			if err != nil {
				return err
			}
			mt := rf.manifest.MediaType
			if mt == "" {
				mt = types.OCIManifestSchema1
			}
			index.Manifests = append(index.Manifests, v1.Descriptor{MediaType: mt, Digest: h, Size: rf.size, ArtifactType: rf.ArtifactType,
				Annotations: map[string]string{mirror.RefNameAnnotation: refName}})
		}
	}
	raw, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return err
	}
	if err := b.writePayload(bundle.DirImages+"/index.json", append(raw, '\n')); err != nil {
		return err
	}
	return b.writePayload(bundle.DirImages+"/oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`+"\n"))
}

// writePayload writes a small payload file.
func (b *builder) writePayload(rel string, data []byte) error {
	p, err := b.payloadPath(rel)
	if err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

// imageRepo is one repository's authenticated access.
type imageRepo struct {
	repo   name.Repository
	client *http.Client
}

func (b *builder) repoAccess(ctx context.Context, repo name.Repository) (*imageRepo, error) {
	b.mu.Lock()
	if b.repos == nil {
		b.repos = map[string]*imageRepoOnce{}
	}
	once := b.repos[repo.Name()]
	if once == nil {
		once = &imageRepoOnce{}
		b.repos[repo.Name()] = once
	}
	b.mu.Unlock()
	once.once.Do(func() {
		auth, err := authn.Resolve(ctx, authn.DefaultKeychain, repo)
		if err != nil {
			once.err = fmt.Errorf("credentials for %s: %w", repo.RegistryStr(), err)
			return
		}
		tr, err := transport.NewWithContext(ctx, repo.Registry, auth, b.client.Transport, []string{repo.Scope(transport.PullScope)})
		if err != nil {
			once.err = err
			return
		}
		once.repo = &imageRepo{repo: repo, client: &http.Client{Transport: tr}}
	})
	return once.repo, once.err
}

type imageRepoOnce struct {
	once sync.Once
	repo *imageRepo
	err  error
}

func (r *imageRepo) url(kind, ref string) string {
	u := url.URL{Scheme: r.repo.Scheme(), Host: r.repo.RegistryStr(), Path: "/v2/" + r.repo.RepositoryStr() + "/" + kind + "/" + ref}
	return u.String()
}

// manifest fetches a manifest by tag or digest and returns its bytes, media
// type and digest. A manifest by digest comes from the cache when an
// earlier build fetched it.
func (b *builder) manifest(ctx context.Context, r *imageRepo, ref string) ([]byte, types.MediaType, v1.Hash, error) {
	byDigest := strings.HasPrefix(ref, "sha256:")
	if byDigest {
		if blob, ok := b.cache.stat(ref); ok {
			if raw, err := os.ReadFile(blob.Path); err == nil && digestOf(raw) == ref {
				mt, err := manifestMediaType(raw)
				if err == nil {
					h, _ := v1.NewHash(ref)
					return raw, mt, h, nil
				}
			}
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url("manifests", ref), nil)
	if err != nil {
		return nil, "", v1.Hash{}, err
	}
	req.Header.Set("Accept", acceptManifests)
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, "", v1.Hash{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("manifest %s: %s %s", ref, resp.Status, strings.TrimSpace(string(body)))
		if resp.StatusCode == http.StatusNotFound {
			err = notFoundError{err}
		}
		return nil, "", v1.Hash{}, err
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestBytes+1))
	if err != nil {
		return nil, "", v1.Hash{}, fmt.Errorf("manifest %s: %w", ref, err)
	}
	if len(raw) > maxManifestBytes {
		return nil, "", v1.Hash{}, fmt.Errorf("manifest %s is larger than %d bytes", ref, maxManifestBytes)
	}
	got := digestOf(raw)
	if byDigest && got != ref {
		return nil, "", v1.Hash{}, fmt.Errorf("manifest %s: the registry sent content with digest %s", ref, got)
	}
	if hdr := resp.Header.Get("Docker-Content-Digest"); !byDigest && hdr != "" && hdr != got {
		return nil, "", v1.Hash{}, fmt.Errorf("manifest %s: content has digest %s, the registry says %s", ref, got, hdr)
	}
	mt := types.MediaType(strings.TrimSpace(strings.Split(resp.Header.Get("Content-Type"), ";")[0]))
	if inner, err := manifestMediaType(raw); err == nil && inner != "" {
		mt = inner
	}
	if mt == "" {
		return nil, "", v1.Hash{}, fmt.Errorf("manifest %s has no media type", ref)
	}
	h, _ := v1.NewHash(got)
	// Keep it by digest, so the next build need not ask.
	if _, err := b.cache.fetch(ctx, fetchRequest{want: got, open: bytesOpener(raw)}); err != nil {
		return nil, "", v1.Hash{}, err
	}
	return raw, mt, h, nil
}

// errManifestNotFound matches a manifest the registry does not have (404).
var errManifestNotFound = errors.New("manifest not found")

type notFoundError struct{ error }

func (notFoundError) Is(target error) bool { return target == errManifestNotFound }

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// manifestMediaType reads the mediaType field a manifest carries (empty
// when it has none).
func manifestMediaType(raw []byte) (types.MediaType, error) {
	var m struct {
		MediaType types.MediaType `json:"mediaType"`
		Manifests json.RawMessage `json:"manifests"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", err
	}
	if m.MediaType == "" && m.Manifests != nil {
		return types.OCIImageIndex, nil
	}
	return m.MediaType, nil
}

func bytesOpener(b []byte) opener {
	return func(context.Context, int64) (io.ReadCloser, int64, error) {
		return io.NopCloser(strings.NewReader(string(b))), 0, nil
	}
}

// fetchImage bundles one image (fetchImageManifests) and what refers to
// it (sources_referrers.go), checked against the verify: rules.
func (b *builder) fetchImage(ctx context.Context, src ImageSource) (imageResult, error) {
	res, err := b.fetchImageManifests(ctx, src)
	if err != nil {
		return res, err
	}
	ref, err := remoteRef(src.Name)
	if err != nil {
		return res, err
	}
	r, err := b.repoAccess(ctx, ref.Context())
	if err != nil {
		return res, err
	}
	_, d, _ := strings.Cut(res.upstream, "@")
	subject, err := v1.NewHash(d)
	if err != nil {
		return res, err
	}
	if res.referrers, err = b.fetchReferrers(ctx, r, subject); err != nil {
		return res, err
	}
	if err := b.verifyImage(src, subject, res.referrers); err != nil {
		return res, err
	}
	for _, rf := range res.referrers {
		how := "referrer"
		if rf.Tag != "" {
			how = "tag " + rf.Tag
		}
		verified := ""
		if rf.VerifiedWith != "" {
			verified = ", verified with " + rf.VerifiedWith
		}
		b.progress.logf("image %s: %s %s (%s%s)", src.Name, rf.Kind, rf.Digest, how, verified)
	}
	return res, nil
}

// fetchImageManifests bundles one image: every requested platform's
// manifest, config and layers, and the index over them.
func (b *builder) fetchImageManifests(ctx context.Context, src ImageSource) (imageResult, error) {
	ref, err := remoteRef(src.Name)
	if err != nil {
		return imageResult{}, err
	}
	r, err := b.repoAccess(ctx, ref.Context())
	if err != nil {
		return imageResult{}, err
	}
	raw, mt, top, err := b.manifest(ctx, r, ref.Identifier())
	if err != nil {
		return imageResult{}, err
	}
	res := imageResult{upstream: upstreamName(src.Name, top)}
	if !mt.IsIndex() {
		plat, err := b.storeImage(ctx, r, raw, top)
		if err != nil {
			return imageResult{}, err
		}
		if len(b.cfg.Platforms) != 1 || plat != b.cfg.Platforms[0] {
			return imageResult{}, fmt.Errorf("a single-platform image for %s, but the bundle lists %s", slashPlatform(plat), platformList(b.cfg.Platforms))
		}
		if err := b.stageBytes(top.String(), raw); err != nil {
			return imageResult{}, err
		}
		res.desc = v1.Descriptor{MediaType: mt, Digest: top, Size: int64(len(raw))}
		res.platforms = []string{slashPlatform(plat)}
		res.digests = []string{top.String()}
		b.progress.logf("image %s (%s)", src.Name, slashPlatform(plat))
		return res, nil
	}
	idx, err := v1.ParseIndexManifest(strings.NewReader(string(raw)))
	if err != nil {
		return imageResult{}, fmt.Errorf("read index %s: %w", top, err)
	}
	var keep []v1.Descriptor
	var offered []string
	for _, p := range b.cfg.Platforms {
		i := slices.IndexFunc(idx.Manifests, func(d v1.Descriptor) bool { return platformMatches(d.Platform, p) })
		if i < 0 {
			for _, d := range idx.Manifests {
				if d.Platform != nil && d.Platform.OS != "unknown" {
					offered = append(offered, d.Platform.OS+"/"+d.Platform.Architecture)
				}
			}
			return imageResult{}, fmt.Errorf("no %s image in its index (it has %s)", slashPlatform(p), strings.Join(slices.Compact(offered), ", "))
		}
		d := idx.Manifests[i]
		if !d.MediaType.IsImage() {
			return imageResult{}, fmt.Errorf("the %s entry of its index is a %s, not an image manifest", slashPlatform(p), d.MediaType)
		}
		if !slices.ContainsFunc(keep, func(k v1.Descriptor) bool { return k.Digest == d.Digest }) {
			keep = append(keep, d)
		}
		res.platforms = append(res.platforms, slashPlatform(p))
	}
	// Attestations (buildx's provenance and SBOM manifests, platform
	// unknown/unknown) of the images taken come along: they are small,
	// and with them an index whose platforms are all taken keeps its
	// upstream bytes and digest.
	for _, d := range idx.Manifests {
		ref, ok := d.Annotations[attestationRef]
		if ok && d.Annotations[attestationType] == "attestation-manifest" && d.MediaType.IsImage() &&
			slices.ContainsFunc(keep, func(k v1.Descriptor) bool { return k.Digest.String() == ref }) &&
			!slices.ContainsFunc(keep, func(k v1.Descriptor) bool { return k.Digest == d.Digest }) {
			keep = append(keep, d)
		}
	}
	res.digests = []string{top.String()}
	g := newGroup(ctx)
	for _, d := range keep {
		res.digests = append(res.digests, d.Digest.String())
		g.Go(func(ctx context.Context) error {
			raw, _, _, err := b.manifest(ctx, r, d.Digest.String())
			if err != nil {
				return err
			}
			if _, err := b.storeImage(ctx, r, raw, d.Digest); err != nil {
				return fmt.Errorf("%s: %w", d.Digest, err)
			}
			return b.stageBytes(d.Digest.String(), raw)
		})
	}
	if err := g.Wait(); err != nil {
		return imageResult{}, err
	}
	if len(keep) < len(idx.Manifests) {
		// Not every manifest is taken: a new index over those that are.
		sub := *idx
		sub.Manifests = nil
		for _, d := range idx.Manifests {
			if slices.ContainsFunc(keep, func(k v1.Descriptor) bool { return k.Digest == d.Digest }) {
				sub.Manifests = append(sub.Manifests, d)
			}
		}
		if sub.MediaType == "" {
			sub.MediaType = mt
		}
		if raw, err = json.Marshal(sub); err != nil {
			return imageResult{}, err
		}
		h, _ := v1.NewHash(digestOf(raw))
		res.digests = append(res.digests, h.String())
		top = h
	}
	if err := b.stageBytes(top.String(), raw); err != nil {
		return imageResult{}, err
	}
	res.desc = v1.Descriptor{MediaType: mt, Digest: top, Size: int64(len(raw))}
	b.progress.logf("image %s (%s)", src.Name, strings.Join(res.platforms, ", "))
	return res, nil
}

// upstreamName is the image's name pinned to the digest the registry gave.
func upstreamName(full string, d v1.Hash) string {
	if at := strings.IndexByte(full, '@'); at >= 0 {
		full = full[:at]
	}
	return full + "@" + d.String()
}

func platformList(ps []mirror.Platform) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = slashPlatform(p)
	}
	return strings.Join(s, ", ")
}

// platformMatches says whether an index entry is the image for p. arm64
// images say variant v8 or nothing.
func platformMatches(pl *v1.Platform, p mirror.Platform) bool {
	if pl == nil || pl.OS != p.OS || pl.Architecture != p.Arch {
		return false
	}
	return pl.Variant == "" || (p.Arch == "arm64" && pl.Variant == "v8")
}

// storeImage stages an image manifest's config and layers and returns the
// platform its config says.
func (b *builder) storeImage(ctx context.Context, r *imageRepo, raw []byte, d v1.Hash) (mirror.Platform, error) {
	m, err := v1.ParseManifest(strings.NewReader(string(raw)))
	if err != nil {
		return mirror.Platform{}, fmt.Errorf("read manifest %s: %w", d, err)
	}
	blobs := append([]v1.Descriptor{m.Config}, m.Layers...)
	g := newGroup(ctx)
	for i, desc := range blobs {
		if len(desc.URLs) > 0 {
			return mirror.Platform{}, fmt.Errorf("layer %s is a foreign layer (%s), which registries do not serve", desc.Digest, desc.URLs[0])
		}
		if i > 0 && deferrable(desc) {
			if err := b.deferImageBlob(r, desc); err != nil {
				return mirror.Platform{}, err
			}
			continue
		}
		g.Go(func(ctx context.Context) error { return b.stageImageBlob(ctx, r, desc) })
	}
	if err := g.Wait(); err != nil {
		return mirror.Platform{}, err
	}
	cfgBlob, ok := b.cache.stat(m.Config.Digest.String())
	if !ok {
		return mirror.Platform{}, fmt.Errorf("config %s went missing from the cache", m.Config.Digest)
	}
	cfgRaw, err := os.ReadFile(cfgBlob.Path)
	if err != nil {
		return mirror.Platform{}, err
	}
	var cf struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	}
	if err := json.Unmarshal(cfgRaw, &cf); err != nil {
		return mirror.Platform{}, fmt.Errorf("read config %s: %w", m.Config.Digest, err)
	}
	return mirror.Platform{OS: cf.OS, Arch: cf.Architecture}, nil
}

// stageImageBlob fetches a config or layer through the cache and puts it in
// the layout, once however many images share it.
func (b *builder) stageImageBlob(ctx context.Context, r *imageRepo, desc v1.Descriptor) error {
	blob, err := b.fetchImageBlob(ctx, r, desc, false)
	if err != nil {
		return err
	}
	return b.stageImageFile(desc.Digest.String(), func(rel string) error {
		if compressedMediaType(desc) {
			b.mu.Lock()
			if b.compressedBlobs == nil {
				b.compressedBlobs = map[string]bool{}
			}
			b.compressedBlobs[rel] = true
			b.mu.Unlock()
		}
		return b.stageBlob(blob, rel)
	})
}

// fetchImageBlob fetches a config or layer into the cache, checked against
// its descriptor's digest and size; slotHeld says the caller took a
// download slot for it.
func (b *builder) fetchImageBlob(ctx context.Context, r *imageRepo, desc v1.Descriptor, slotHeld bool) (cachedBlob, error) {
	d := desc.Digest.String()
	blob, err := b.fetchBlob(ctx, fetchRequest{want: d, open: r.blobOpener(d), slotHeld: slotHeld})
	if err != nil {
		var mismatch *DigestMismatchError
		if errors.As(err, &mismatch) {
			return cachedBlob{}, fmt.Errorf("blob %s: the registry sent content with digest %s", d, mismatch.Got)
		}
		return cachedBlob{}, fmt.Errorf("blob %s: %w", d, err)
	}
	if desc.Size > 0 && blob.Size != desc.Size {
		return cachedBlob{}, fmt.Errorf("blob %s is %d bytes, its manifest says %d", d, blob.Size, desc.Size)
	}
	if err := verifyCached(blob); err != nil {
		return cachedBlob{}, err
	}
	blob.Checked = true
	return blob, nil
}

// stageBytes puts a manifest into the layout.
func (b *builder) stageBytes(digest string, raw []byte) error {
	return b.stageImageFile(digest, func(rel string) error { return b.writePayload(rel, raw) })
}

// stageImageFile runs put for a blob path of the layout unless another
// image already did.
func (b *builder) stageImageFile(digest string, put func(rel string) error) error {
	h, herr := digestHex(digest)
	if herr != nil {
		return herr
	}
	rel := bundle.DirImages + "/blobs/sha256/" + h
	b.mu.Lock()
	if b.stagedBlobs == nil {
		b.stagedBlobs = map[string]*sync.Once{}
	}
	once := b.stagedBlobs[rel]
	if once == nil {
		once = &sync.Once{}
		b.stagedBlobs[rel] = once
	}
	b.mu.Unlock()
	var err error
	once.Do(func() { err = put(rel) })
	if err != nil {
		// Let a later caller try again.
		b.mu.Lock()
		delete(b.stagedBlobs, rel)
		b.mu.Unlock()
	}
	return err
}

// blobOpener reads a blob from the registry, continuing at offset with a
// Range request where the registry allows it.
func (r *imageRepo) blobOpener(digest string) opener {
	return httpOpener(r.client, r.url("blobs", digest))
}
