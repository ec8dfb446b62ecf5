package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// maxManifestSize bounds the manifests read from a layout (distribution's
// own limit is 4 MiB).
const maxManifestSize = 4 << 20

// maxIndexDepth bounds indexes nested in indexes.
const maxIndexDepth = 4

// LayoutImage is one image of an OCI layout's index.json that carries a
// reference.
type LayoutImage struct {
	// Ref is the image's original reference (from RefNameAnnotation).
	Ref ImageRef
	// Descriptor is the index.json entry: the image manifest or index.
	Descriptor v1.Descriptor
}

// ReadLayoutImages reads the index.json of the OCI layout at dir and returns
// its images in file order. An entry without a full reference in
// RefNameAnnotation (or containerd's io.containerd.image.name) is skipped
// and reported through skipped. A missing index.json is an error wrapping
// fs.ErrNotExist.
func ReadLayoutImages(dir string) (images []LayoutImage, skipped []string, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("read image layout: %w", err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, nil, fmt.Errorf("read image layout: decode %s: %w", filepath.Join(dir, "index.json"), err)
	}
	for _, d := range idx.Manifests {
		var ref ImageRef
		perr := errors.New("no reference annotation")
		for _, key := range []string{RefNameAnnotation, containerdNameAnnotation} {
			s := d.Annotations[key]
			if s == "" {
				continue
			}
			if !strings.Contains(s, "/") {
				perr = fmt.Errorf("%s=%q is not a full reference (HOST/PATH:TAG)", key, s)
				continue
			}
			if ref, perr = ParseImageRef(s); perr == nil {
				break
			}
		}
		if perr != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", d.Digest, perr))
			continue
		}
		if ref.Digest != "" && ref.Digest != d.Digest.String() {
			return nil, nil, fmt.Errorf("read image layout: %s is recorded with digest %s", ref, d.Digest)
		}
		images = append(images, LayoutImage{Ref: ref, Descriptor: d})
	}
	return images, skipped, nil
}

// blobPath returns the file of a blob in the layout at dir.
func blobPath(dir string, h v1.Hash) string {
	return filepath.Join(dir, "blobs", h.Algorithm, h.Hex)
}

// repository is what the registry serves for one repository name.
type repository struct {
	name string
	// tags maps a tag to its manifest or index.
	tags map[string]v1.Hash
	// manifests are the manifests and indexes reachable from the tags, with
	// their media types.
	manifests map[v1.Hash]types.MediaType
	// blobs are the configs and layers reachable from the manifests.
	blobs map[v1.Hash]bool
	// referrers maps a digest to the descriptors of the manifests whose
	// subject it is (OCI 1.1), sorted by digest.
	referrers map[v1.Hash][]v1.Descriptor
}

// layoutIndex is the registry's view of an OCI layout: which repository may
// read which manifest and blob. It holds digests and media types only; the
// content stays in the blob files.
type layoutIndex struct {
	dir   string
	repos map[string]*repository
	// checked caches the size checks of blob files shared by images.
	checked map[v1.Hash]bool
}

// loadLayout reads index.json and every manifest reachable from it, hashing
// each manifest and checking that every config and layer blob exists with
// its recorded size (layers are not re-hashed: the layout is content
// addressed and was verified at install). A missing layout folder is an
// empty registry.
func loadLayout(dir string, log *slog.Logger) (*layoutIndex, error) {
	li := &layoutIndex{dir: dir, repos: map[string]*repository{}, checked: map[v1.Hash]bool{}}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return li, nil
	}
	images, skipped, err := ReadLayoutImages(dir)
	if err != nil {
		return nil, err
	}
	for _, s := range skipped {
		log.Warn("image without a full reference is not served", "entry", s)
	}
	for _, img := range images {
		name := img.Ref.Repository()
		repo := li.repos[name]
		if repo == nil {
			repo = &repository{name: name, tags: map[string]v1.Hash{}, manifests: map[v1.Hash]types.MediaType{}, blobs: map[v1.Hash]bool{},
				referrers: map[v1.Hash][]v1.Descriptor{}}
			li.repos[name] = repo
		}
		if err := li.walk(repo, img.Descriptor, 0); err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Ref, err)
		}
		if img.Ref.Tag == "" {
			continue
		}
		if old, ok := repo.tags[img.Ref.Tag]; ok && old != img.Descriptor.Digest {
			return nil, fmt.Errorf("image %s: tag %s is in the layout twice, as %s and %s", img.Ref, img.Ref.Tag, old, img.Descriptor.Digest)
		}
		repo.tags[img.Ref.Tag] = img.Descriptor.Digest
	}
	return li, nil
}

// walk records a manifest or index and everything it references in repo.
func (li *layoutIndex) walk(repo *repository, d v1.Descriptor, depth int) error {
	if _, ok := repo.manifests[d.Digest]; ok {
		return nil
	}
	if depth > maxIndexDepth {
		return fmt.Errorf("indexes nested deeper than %d", maxIndexDepth)
	}
	raw, err := li.readManifest(d)
	if err != nil {
		return err
	}
	var m struct {
		MediaType    types.MediaType   `json:"mediaType"`
		ArtifactType string            `json:"artifactType"`
		Manifests    []v1.Descriptor   `json:"manifests"`
		Config       *v1.Descriptor    `json:"config"`
		Layers       []v1.Descriptor   `json:"layers"`
		Subject      *v1.Descriptor    `json:"subject"`
		Annotations  map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	mt := d.MediaType
	if mt == "" {
		mt = m.MediaType
	}
	if mt == "" {
		return fmt.Errorf("manifest %s has no media type", d.Digest)
	}
	repo.manifests[d.Digest] = mt
	if m.Subject != nil {
		// A referrer: its artifact type is the manifest's, else (an image
		// manifest used as an artifact) its config's media type.
		at := m.ArtifactType
		if at == "" && m.Config != nil {
			at = string(m.Config.MediaType)
		}
		refs := append(repo.referrers[m.Subject.Digest], v1.Descriptor{MediaType: mt, Digest: d.Digest, Size: d.Size, ArtifactType: at, Annotations: m.Annotations})
		sort.Slice(refs, func(i, j int) bool { return refs[i].Digest.String() < refs[j].Digest.String() })
		repo.referrers[m.Subject.Digest] = refs
	}
	if mt.IsIndex() {
		for _, child := range m.Manifests {
			if err := li.walk(repo, child, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	blobs := m.Layers
	if m.Config != nil {
		blobs = append(blobs, *m.Config)
	}
	for _, b := range blobs {
		if err := li.checkBlob(b); err != nil {
			if !b.MediaType.IsDistributable() && errors.Is(err, fs.ErrNotExist) {
				continue // a foreign layer, pulled from its own URLs
			}
			return err
		}
		repo.blobs[b.Digest] = true
	}
	return nil
}

// readManifest reads a manifest blob and checks its size and digest.
func (li *layoutIndex) readManifest(d v1.Descriptor) ([]byte, error) {
	if d.Digest.Algorithm != "sha256" {
		return nil, fmt.Errorf("manifest %s: only sha256 digests are supported", d.Digest)
	}
	if d.Size > maxManifestSize {
		return nil, fmt.Errorf("manifest %s: %d bytes, more than the %d a registry accepts", d.Digest, d.Size, maxManifestSize)
	}
	f, err := os.Open(blobPath(li.dir, d.Digest))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	sum := sha256.Sum256(raw)
	if int64(len(raw)) != d.Size || hex.EncodeToString(sum[:]) != d.Digest.Hex {
		return nil, fmt.Errorf("manifest %s: the file does not match its digest and size: the layout is damaged, reinstall the bundle", d.Digest)
	}
	return raw, nil
}

// checkBlob checks that a config or layer blob exists with its size.
func (li *layoutIndex) checkBlob(d v1.Descriptor) error {
	if li.checked[d.Digest] {
		return nil
	}
	if d.Digest.Algorithm != "sha256" || len(d.Digest.Hex) != 64 {
		return fmt.Errorf("blob %s: only sha256 digests are supported", d.Digest)
	}
	st, err := os.Stat(blobPath(li.dir, d.Digest))
	if err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	if !st.Mode().IsRegular() || st.Size() != d.Size {
		return fmt.Errorf("blob %s: %d bytes on disk, %d recorded: the layout is damaged, reinstall the bundle", d.Digest, st.Size(), d.Size)
	}
	li.checked[d.Digest] = true
	return nil
}

// names returns the repository names in order.
func (li *layoutIndex) names() []string {
	out := make([]string, 0, len(li.repos))
	for n := range li.repos {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
