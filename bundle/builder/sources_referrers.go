package builder

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"airgapcoder/bundle"
	"airgapcoder/mirror"
)

// Signatures, attestations and SBOMs cross the gap with their images. For
// each image the build asks the registry for what refers to the image's
// upstream digest:
//
//   - the OCI 1.1 referrers API (GET /v2/<name>/referrers/<digest>), or,
//     where the registry has none, the referrers tag schema's index under
//     the tag sha256-<hex>;
//   - cosign's tag schema: the tags sha256-<hex>.sig, .att and .sbom.
//
// Each such manifest, with its config and layers, is stored in the layout
// and listed in index.json under the image's repository: by digest (a
// referrer) or by its tag (cosign's), so that the mirror serves both ways
// and push-images pushes them. The bundle manifest lists them per image.
//
// A verify: rule makes a build refuse an image whose name it matches unless
// one of its cosign signatures (by tag or as a referrer) verifies with the
// rule's key and names the image's digest.

// Media and artifact types cosign uses.
const (
	cosignPayloadType         = "application/vnd.dev.cosign.simplesigning.v1+json"
	cosignSignatureAnnotation = "dev.cosignproject.cosign/signature"
	cosignSignatureArtifact   = "application/vnd.dev.cosign.artifact.sig.v1+json"
)

// referrer is one artifact fetched for an image.
type referrer struct {
	bundle.ImageReferrer
	manifest v1.Manifest
	size     int64 // of the manifest
}

// fetchReferrers stores what refers to subject in repository r and returns
// it, referrers first, then cosign's tags.
func (b *builder) fetchReferrers(ctx context.Context, r *imageRepo, subject v1.Hash) ([]referrer, error) {
	// The referrers API and cosign's three tags are asked at once, and
	// every artifact found is fetched at once: a build waits for one round
	// of lookups, not for each in turn.
	var descs []v1.Descriptor
	tags := []string{"sig", "att", "sbom"}
	byTag := make([]*referrer, len(tags))
	g := newGroup(ctx)
	g.Go(func(ctx context.Context) error {
		var err error
		descs, err = b.referrerDescriptors(ctx, r, subject)
		return err
	})
	for i, suffix := range tags {
		g.Go(func(ctx context.Context) error {
			tag := strings.Replace(subject.String(), ":", "-", 1) + "." + suffix
			ref, err := b.storeReferrer(ctx, r, tag, subject)
			if errors.Is(err, errManifestNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			ref.Tag, ref.Kind = tag, artifactKind(ref.ArtifactType, suffix)
			byTag[i] = &ref
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var images []v1.Descriptor
	for _, d := range descs {
		if d.MediaType.IsImage() { // an index of artifacts is not carried yet
			images = append(images, d)
		}
	}
	out := make([]referrer, len(images))
	g = newGroup(ctx)
	for i, d := range images {
		g.Go(func(ctx context.Context) error {
			ref, err := b.storeReferrer(ctx, r, d.Digest.String(), subject)
			if err != nil {
				return err
			}
			if d.ArtifactType != "" {
				ref.ArtifactType = d.ArtifactType
			}
			ref.Kind = artifactKind(ref.ArtifactType, "")
			out[i] = ref
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, ref := range byTag {
		if ref != nil {
			out = append(out, *ref)
		}
	}
	return out, nil
}

// referrerDescriptors lists the referrers of subject: from the referrers
// API, else from the referrers tag schema, else none.
func (b *builder) referrerDescriptors(ctx context.Context, r *imageRepo, subject v1.Hash) ([]v1.Descriptor, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url("referrers", subject.String()), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(types.OCIImageIndex))
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("referrers of %s: %w", subject, err)
	}
	defer resp.Body.Close()
	var raw []byte
	switch {
	case resp.StatusCode == http.StatusOK:
		if raw, err = io.ReadAll(io.LimitReader(resp.Body, maxManifestBytes+1)); err != nil {
			return nil, fmt.Errorf("referrers of %s: %w", subject, err)
		}
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusMethodNotAllowed:
		// No referrers API: the tag schema's index, if there is one.
		raw, _, _, err = b.manifest(ctx, r, strings.Replace(subject.String(), ":", "-", 1))
		if errors.Is(err, errManifestNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("referrers of %s (tag schema): %w", subject, err)
		}
	default:
		return nil, fmt.Errorf("referrers of %s: the registry answered %s", subject, resp.Status)
	}
	if len(raw) > maxManifestBytes {
		return nil, fmt.Errorf("referrers of %s: the index is larger than %d bytes", subject, maxManifestBytes)
	}
	idx, err := v1.ParseIndexManifest(strings.NewReader(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("referrers of %s: %w", subject, err)
	}
	// Registries list them in no set order; the bundle must not vary.
	slices.SortFunc(idx.Manifests, func(a, b v1.Descriptor) int { return strings.Compare(a.Digest.String(), b.Digest.String()) })
	return idx.Manifests, nil
}

// storeReferrer fetches the manifest ref names (a digest or a tag) and
// stages it with its config and layers.
func (b *builder) storeReferrer(ctx context.Context, r *imageRepo, ref string, subject v1.Hash) (referrer, error) {
	raw, _, d, err := b.manifest(ctx, r, ref)
	if err != nil {
		return referrer{}, err
	}
	m, err := v1.ParseManifest(strings.NewReader(string(raw)))
	if err != nil {
		return referrer{}, fmt.Errorf("artifact %s: %w", ref, err)
	}
	for _, desc := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		if len(desc.URLs) > 0 {
			return referrer{}, fmt.Errorf("artifact %s: blob %s is foreign (%s)", ref, desc.Digest, desc.URLs[0])
		}
		if err := b.stageImageBlob(ctx, r, desc); err != nil {
			return referrer{}, fmt.Errorf("artifact %s: %w", ref, err)
		}
	}
	if err := b.stageBytes(d.String(), raw); err != nil {
		return referrer{}, err
	}
	at := m.ArtifactType
	if at == "" {
		at = string(m.Config.MediaType)
	}
	return referrer{ImageReferrer: bundle.ImageReferrer{Digest: d.String(), ArtifactType: at, Subject: subject.String()}, manifest: *m, size: int64(len(raw))}, nil
}

// artifactKind names what an artifact type (or cosign tag suffix) holds.
func artifactKind(artifactType, suffix string) string {
	at := strings.ToLower(artifactType)
	switch {
	case suffix == "sig" || at == cosignSignatureArtifact || strings.Contains(at, "signature"):
		return "signature"
	case suffix == "sbom" || strings.Contains(at, "spdx") || strings.Contains(at, "cyclonedx") || strings.Contains(at, "sbom"):
		return "sbom"
	case suffix == "att" || strings.Contains(at, "in-toto") || strings.Contains(at, "attestation") || strings.Contains(at, "dsse"):
		return "attestation"
	}
	return "other"
}

// matches reports whether the rule covers image src.
func (rule VerifyRule) matches(src ImageSource) bool {
	r, err := mirror.ParseImageRef(src.Name)
	if err != nil {
		return false
	}
	ok, _ := path.Match(rule.Images, r.Host+"/"+r.Path)
	return ok
}

// verifyImage checks src's signatures against every rule that covers it,
// and records which key verified which signature.
func (b *builder) verifyImage(src ImageSource, subject v1.Hash, refs []referrer) error {
	for _, rule := range b.cfg.Verify {
		if !rule.matches(src) {
			continue
		}
		var why []string
		ok := false
		for i := range refs {
			if refs[i].Kind != "signature" {
				continue
			}
			err := b.verifySignature(refs[i].manifest, subject, rule.Key)
			if err != nil {
				why = append(why, fmt.Sprintf("%s: %v", refs[i].Digest, err))
				continue
			}
			refs[i].VerifiedWith, ok = rule.KeyFile, true
		}
		if ok {
			continue
		}
		if len(why) == 0 {
			why = []string{"the registry holds no cosign signature of " + subject.String()}
		}
		return fmt.Errorf("no signature verifies with %s (%s, %s): %s; fix the signature or the key, or drop the image",
			rule.KeyFile, rule.Field, rule.Images, strings.Join(why, "; "))
	}
	return nil
}

// verifySignature checks a cosign signature manifest: a simple-signing
// payload layer whose annotation is its signature by key, and which names
// subject.
func (b *builder) verifySignature(m v1.Manifest, subject v1.Hash, key crypto.PublicKey) error {
	var why error = errors.New("no simple-signing layer")
	for _, l := range m.Layers {
		if l.MediaType != cosignPayloadType {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(l.Annotations[cosignSignatureAnnotation])
		if err != nil || len(sig) == 0 {
			why = errors.New("a payload without a signature annotation")
			continue
		}
		blob, ok := b.cache.stat(l.Digest.String())
		if !ok {
			return fmt.Errorf("payload %s went missing from the cache", l.Digest)
		}
		payload, err := os.ReadFile(blob.Path)
		if err != nil {
			return err
		}
		if !verifyCosign(key, payload, sig) {
			why = errors.New("the signature does not verify with this key")
			continue
		}
		var p struct {
			Critical struct {
				Image struct {
					Digest string `json:"docker-manifest-digest"`
				} `json:"image"`
			} `json:"critical"`
		}
		if err := json.Unmarshal(payload, &p); err != nil {
			why = fmt.Errorf("the signed payload is not simple-signing JSON: %v", err)
			continue
		}
		if p.Critical.Image.Digest != subject.String() {
			why = fmt.Errorf("it signs %s, not this image", p.Critical.Image.Digest)
			continue
		}
		return nil
	}
	return why
}

// verifyCosign checks sig over payload as cosign makes it: ECDSA (ASN.1)
// over its SHA-256, or Ed25519 over the payload itself.
func verifyCosign(key crypto.PublicKey, payload, sig []byte) bool {
	switch k := key.(type) {
	case *ecdsa.PublicKey:
		sum := sha256.Sum256(payload)
		return ecdsa.VerifyASN1(k, sum[:], sig)
	case ed25519.PublicKey:
		return ed25519.Verify(k, payload, sig)
	}
	return false
}

// readCosignKey reads a cosign public key file (cosign.pub: a PEM "PUBLIC
// KEY", ECDSA or Ed25519).
func readCosignKey(file string) (crypto.PublicKey, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%s is not a PEM public key (as cosign generate-key-pair writes cosign.pub)", file)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	switch key.(type) {
	case *ecdsa.PublicKey, ed25519.PublicKey:
		return key, nil
	}
	return nil, fmt.Errorf("%s holds a %T key; cosign keys are ECDSA or Ed25519", file, key)
}
