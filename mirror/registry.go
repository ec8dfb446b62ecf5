package mirror

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Registry is a read-only OCI distribution registry over an OCI image layout
// (see the package documentation). It serves manifests, indexes and blobs by
// digest straight from the layout's blob files with http.ServeContent
// (Range, ETag), tags and the catalog from what it read at start. It is
// immutable after NewRegistry and safe for any number of concurrent pulls.
type Registry struct {
	layout *layoutIndex
	log    *slog.Logger
}

// NewRegistry reads the OCI layout at dir (see loadLayout for the checks).
// A missing dir gives an empty registry. Changes to the layout after this
// call are not seen: create a new Registry.
func NewRegistry(dir string, log *slog.Logger) (*Registry, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	li, err := loadLayout(dir, log)
	if err != nil {
		return nil, fmt.Errorf("mirror: registry: %w", err)
	}
	return &Registry{layout: li, log: log}, nil
}

// Repositories returns the names of the repositories served, sorted.
func (rg *Registry) Repositories() []string { return rg.layout.names() }

// Registry error codes, only from the distribution specification's list
// (clients and the conformance suite know no others).
const (
	codeUnsupported     = "UNSUPPORTED"
	codeNameUnknown     = "NAME_UNKNOWN"
	codeManifestUnknown = "MANIFEST_UNKNOWN"
	codeBlobUnknown     = "BLOB_UNKNOWN"
	codeDigestInvalid   = "DIGEST_INVALID"
	// codeUnknown is Docker's code for a server error, which the
	// specification's list has none for; only a 500 carries it.
	codeUnknown = "UNKNOWN"
)

// regError is an error the registry answers with its JSON error format.
type regError struct {
	status  int
	code    string
	message string
}

func (e *regError) Error() string { return e.code + ": " + e.message }

func regErrorf(status int, code, format string, args ...any) error {
	return &regError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// ServeHTTP answers the distribution API under /v2/.
func (rg *Registry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	err := rg.serve(w, r)
	if err == nil {
		return
	}
	var re *regError
	if !errors.As(err, &re) {
		rg.log.Error("registry request", "method", r.Method, "path", r.URL.Path, "err", err)
		re = &regError{status: http.StatusInternalServerError, code: codeUnknown, message: "internal error"}
	}
	if re.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", "GET, HEAD")
	}
	respondJSON(w, re.status, map[string]any{
		"errors": []map[string]string{{"code": re.code, "message": re.message}},
	})
}

func (rg *Registry) serve(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return regErrorf(http.StatusMethodNotAllowed, codeUnsupported, "this registry is read-only: %s is not supported", r.Method)
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v2/")
	switch {
	case !ok && r.URL.Path != "/v2":
		return regErrorf(http.StatusNotFound, codeUnsupported, "not a registry path: %s", r.URL.Path)
	case rest == "":
		respondJSON(w, http.StatusOK, struct{}{})
		return nil
	case rest == "_catalog":
		return rg.catalog(w, r)
	}
	if name, ok := strings.CutSuffix(rest, "/tags/list"); ok {
		repo, err := rg.repo(name)
		if err != nil {
			return err
		}
		return rg.tags(w, r, repo)
	}
	if i := strings.LastIndex(rest, "/manifests/"); i > 0 {
		repo, err := rg.repo(rest[:i])
		if err != nil {
			return err
		}
		return rg.manifest(w, r, repo, rest[i+len("/manifests/"):])
	}
	if i := strings.LastIndex(rest, "/referrers/"); i > 0 {
		repo, err := rg.repo(rest[:i])
		if err != nil {
			return err
		}
		return rg.referrers(w, r, repo, rest[i+len("/referrers/"):])
	}
	if i := strings.LastIndex(rest, "/blobs/"); i > 0 {
		ref := rest[i+len("/blobs/"):]
		if ref == "uploads" || strings.HasPrefix(ref, "uploads/") {
			return regErrorf(http.StatusMethodNotAllowed, codeUnsupported, "this registry is read-only: uploads are not supported")
		}
		repo, err := rg.repo(rest[:i])
		if err != nil {
			return err
		}
		return rg.blob(w, r, repo, ref)
	}
	return regErrorf(http.StatusNotFound, codeUnsupported, "not a registry path: %s", r.URL.Path)
}

// referrers answers the OCI 1.1 referrers API: an image index of the
// manifests in the repository whose subject is digest (signatures,
// attestations, SBOMs that came along with the images), empty when none
// is, as the specification wants. ?artifactType=T keeps those of type T,
// and the answer says the filter was applied.
func (rg *Registry) referrers(w http.ResponseWriter, r *http.Request, repo *repository, ref string) error {
	h, err := parseDigest(ref)
	if err != nil {
		return err
	}
	refs := repo.referrers[h]
	if at := r.URL.Query().Get("artifactType"); at != "" {
		w.Header().Set("OCI-Filters-Applied", "artifactType")
		var kept []v1.Descriptor
		for _, d := range refs {
			if d.ArtifactType == at {
				kept = append(kept, d)
			}
		}
		refs = kept
	}
	if refs == nil {
		refs = []v1.Descriptor{}
	}
	b, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: "application/vnd.oci.image.index.v1+json", Manifests: refs})
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(b)
	}
	return nil
}

func (rg *Registry) repo(name string) (*repository, error) {
	repo := rg.layout.repos[name]
	if repo == nil {
		return nil, regErrorf(http.StatusNotFound, codeNameUnknown, "repository %s is not in this mirror", name)
	}
	return repo, nil
}

func parseDigest(s string) (v1.Hash, error) {
	h, err := v1.NewHash(s)
	if err != nil {
		return h, regErrorf(http.StatusBadRequest, codeDigestInvalid, "invalid digest %q", s)
	}
	return h, nil
}

func (rg *Registry) manifest(w http.ResponseWriter, r *http.Request, repo *repository, ref string) error {
	var digest v1.Hash
	if strings.Contains(ref, ":") {
		h, err := parseDigest(ref)
		if err != nil {
			return err
		}
		digest = h
	} else {
		// A malformed tag names no manifest: the specification's answer
		// is 404 MANIFEST_UNKNOWN.
		h, ok := repo.tags[ref]
		if !tagPattern.MatchString(ref) {
			ok = false
		}
		if !ok {
			return regErrorf(http.StatusNotFound, codeManifestUnknown, "%s:%s is not in this mirror", repo.name, ref)
		}
		digest = h
	}
	mt, ok := repo.manifests[digest]
	if !ok {
		return regErrorf(http.StatusNotFound, codeManifestUnknown, "manifest %s is not in %s", digest, repo.name)
	}
	return rg.serveBlob(w, r, digest, string(mt))
}

func (rg *Registry) blob(w http.ResponseWriter, r *http.Request, repo *repository, ref string) error {
	digest, err := parseDigest(ref)
	if err != nil {
		return err
	}
	if mt, ok := repo.manifests[digest]; ok {
		return rg.serveBlob(w, r, digest, string(mt))
	}
	if !repo.blobs[digest] {
		return regErrorf(http.StatusNotFound, codeBlobUnknown, "blob %s is not in %s", digest, repo.name)
	}
	return rg.serveBlob(w, r, digest, "application/octet-stream")
}

// serveBlob answers with a blob file: the stored bytes, never re-hashed
// (the layout is content addressed and was verified when installed).
// http.ServeContent handles HEAD, Range (open-ended and suffix ranges
// included), If-Range and If-None-Match against the digest ETag.
func (rg *Registry) serveBlob(w http.ResponseWriter, r *http.Request, digest v1.Hash, contentType string) error {
	f, err := os.Open(blobPath(rg.layout.dir, digest))
	if errors.Is(err, fs.ErrNotExist) {
		return regErrorf(http.StatusNotFound, codeBlobUnknown, "blob %s is missing from the layout", digest)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Docker-Content-Digest", digest.String())
	h.Set("ETag", `"`+digest.String()+`"`)
	h.Set("Cache-Control", "max-age=31536000, immutable")
	http.ServeContent(w, r, "", time.Time{}, f)
	return nil
}

// page applies the n and last query parameters of the tags list and the
// catalog to sorted names, and sets the Link header of the next page.
func page(w http.ResponseWriter, r *http.Request, names []string) ([]string, error) {
	q := r.URL.Query()
	if last := q.Get("last"); last != "" {
		i := sort.SearchStrings(names, last)
		if i < len(names) && names[i] == last {
			i++
		}
		names = names[i:]
	}
	if s := q.Get("n"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, regErrorf(http.StatusBadRequest, codeUnsupported, "invalid n %q: a page size is a whole number", s)
		}
		if n < len(names) {
			names = names[:n]
			if n > 0 {
				next := url.URL{Path: r.URL.Path, RawQuery: url.Values{"n": {s}, "last": {names[n-1]}}.Encode()}
				w.Header().Set("Link", fmt.Sprintf("<%s>; rel=\"next\"", next.String()))
			}
		}
	}
	if names == nil {
		names = []string{}
	}
	return names, nil
}

func (rg *Registry) tags(w http.ResponseWriter, r *http.Request, repo *repository) error {
	tags := make([]string, 0, len(repo.tags))
	for t := range repo.tags {
		tags = append(tags, t)
	}
	sort.Strings(tags)
	tags, err := page(w, r, tags)
	if err != nil {
		return err
	}
	respondJSON(w, http.StatusOK, map[string]any{"name": repo.name, "tags": tags})
	return nil
}

func (rg *Registry) catalog(w http.ResponseWriter, r *http.Request) error {
	names, err := page(w, r, rg.layout.names())
	if err != nil {
		return err
	}
	respondJSON(w, http.StatusOK, map[string]any{"repositories": names})
	return nil
}

// respondJSON answers with v as JSON, Content-Type exactly application/json.
func respondJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"message":"encode response"}`)
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
