package upstreamtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What cosign stores, as far as bundles care: a signature is an image
// manifest whose layer is a "simple signing" JSON payload naming the signed
// digest, with the payload's ECDSA signature (base64, ASN.1) in a layer
// annotation. cosign's classic layout tags it sha256-<hex>.sig in the
// image's repository; with OCI 1.1 it is a referrer (subject = the signed
// manifest, artifact type the config's media type).
const (
	// CosignPayloadType is the media type of a signature's payload layer.
	CosignPayloadType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// CosignSignatureAnnotation holds the payload's signature.
	CosignSignatureAnnotation = "dev.cosignproject.cosign/signature"
	// CosignSignatureArtifactType is a signature referrer's artifact type.
	CosignSignatureArtifactType = "application/vnd.dev.cosign.artifact.sig.v1+json"
	// SPDXArtifactType is an SBOM referrer's artifact type.
	SPDXArtifactType = "application/spdx+json"
)

// Referrer is an artifact the registry holds about an image.
type Referrer struct {
	Digest       v1.Hash
	ArtifactType string
}

// SignedImage is what the upstream signed of one image.
type SignedImage struct {
	// Ref and Digest name the signed image (its index).
	Ref    string
	Digest v1.Hash
	// SignatureTag is the cosign tag schema's tag, sha256-<hex>.sig, and
	// SignatureTagDigest the manifest it names.
	SignatureTag       string
	SignatureTagDigest v1.Hash
	// Referrers are the OCI 1.1 referrers: a signature, then an SBOM.
	Referrers []Referrer
}

// signImage signs img (by its index digest) with key, both ways, and adds
// an SPDX SBOM as a second referrer; everything is pushed with push.
func signImage(img Image, key *ecdsa.PrivateKey, push remote.Option, blobs map[v1.Hash]bool) (*SignedImage, error) {
	repo, err := name.NewRepository("images.test/"+img.Repository, name.StrictValidation)
	if err != nil {
		return nil, err
	}
	payload, err := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": strings.SplitN(img.Ref, ":", 2)[0]},
			"image":    map[string]string{"docker-manifest-digest": img.Digest.String()},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	})
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		return nil, err
	}
	sigLayer := artifactBlob{data: payload, mediaType: CosignPayloadType, annotations: map[string]string{CosignSignatureAnnotation: base64.StdEncoding.EncodeToString(sig)}}
	indexSize, err := img.Index.Size()
	if err != nil {
		return nil, err
	}
	subject := &v1.Descriptor{MediaType: types.OCIImageIndex, Digest: img.Digest, Size: indexSize}

	s := &SignedImage{Ref: img.Ref, Digest: img.Digest, SignatureTag: strings.Replace(img.Digest.String(), ":", "-", 1) + ".sig"}
	// The tag schema: an ordinary image config, no subject.
	s.SignatureTagDigest, err = pushArtifact(repo, s.SignatureTag, `{"architecture":"","os":"","config":{},"rootfs":{"type":"layers","diff_ids":[]}}`,
		string(types.OCIConfigJSON), nil, sigLayer, push, blobs)
	if err != nil {
		return nil, fmt.Errorf("push signature tag: %w", err)
	}
	for _, a := range []struct {
		artifactType string
		layer        artifactBlob
	}{
		{CosignSignatureArtifactType, sigLayer},
		{SPDXArtifactType, artifactBlob{data: []byte(`{"spdxVersion":"SPDX-2.3","name":"` + img.Repository + `"}`), mediaType: SPDXArtifactType}},
	} {
		d, err := pushArtifact(repo, "", "{}", a.artifactType, subject, a.layer, push, blobs)
		if err != nil {
			return nil, fmt.Errorf("push %s referrer: %w", a.artifactType, err)
		}
		s.Referrers = append(s.Referrers, Referrer{Digest: d, ArtifactType: a.artifactType})
	}
	return s, nil
}

// artifactBlob is an artifact manifest's one layer.
type artifactBlob struct {
	data        []byte
	mediaType   string
	annotations map[string]string
}

// pushArtifact pushes a manifest with config (of media type configType)
// and one layer, tied to subject when it is set, under tag or by digest,
// and adds the manifest's, config's and layer's digests to blobs.
func pushArtifact(repo name.Repository, tag, config, configType string, subject *v1.Descriptor, layer artifactBlob, push remote.Option, blobs map[v1.Hash]bool) (v1.Hash, error) {
	desc := func(data []byte, mt string) (v1.Descriptor, error) {
		if err := remote.WriteLayer(repo, static.NewLayer(data, types.MediaType(mt)), push); err != nil {
			return v1.Descriptor{}, err
		}
		h, _, err := v1.SHA256(strings.NewReader(string(data)))
		blobs[h] = true
		return v1.Descriptor{MediaType: types.MediaType(mt), Digest: h, Size: int64(len(data))}, err
	}
	cfg, err := desc([]byte(config), configType)
	if err != nil {
		return v1.Hash{}, err
	}
	l, err := desc(layer.data, layer.mediaType)
	if err != nil {
		return v1.Hash{}, err
	}
	l.Annotations = layer.annotations
	raw, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: cfg, Layers: []v1.Descriptor{l}, Subject: subject})
	if err != nil {
		return v1.Hash{}, err
	}
	h, _, err := v1.SHA256(strings.NewReader(string(raw)))
	if err != nil {
		return v1.Hash{}, err
	}
	blobs[h] = true
	var ref name.Reference = repo.Digest(h.String())
	if tag != "" {
		ref = repo.Tag(tag)
	}
	return h, remote.Put(ref, rawManifest{raw: raw, mt: types.OCIManifestSchema1}, push)
}

type rawManifest struct {
	raw []byte
	mt  types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }

// newCosignKey makes a signing key and its public key in PEM, as `cosign
// generate-key-pair` writes cosign.pub.
func newCosignKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
