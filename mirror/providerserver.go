package mirror

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// ProviderHandler serves the provider tree at dir (the layout AddProvider
// writes) with the provider network mirror protocol, for paths relative to
// the mirror's base URL:
//
//	/<hostname>/<namespace>/<type>/index.json
//	/<hostname>/<namespace>/<type>/<version>.json
//	/<hostname>/<namespace>/<type>/<archive>.zip
//
// JSON is served as application/json, archives as application/zip, both
// with Range and conditional requests (http.ServeContent). The url of an
// archive in <version>.json is relative, so it resolves to the zip next to
// the JSON file. Anything else, including folders and hidden files, is 404.
func ProviderHandler(dir string) http.Handler {
	return &providerHandler{dir: dir}
}

type providerHandler struct{ dir string }

type httpError struct {
	status  int
	message string
}

func (e *httpError) Error() string { return e.message }

func (p *providerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	err := p.serve(w, r)
	if err == nil {
		return
	}
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{status: http.StatusInternalServerError, message: "internal error"}
	}
	if he.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", "GET, HEAD")
	}
	respondJSON(w, he.status, map[string]string{"message": he.message})
}

func (p *providerHandler) serve(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return &httpError{http.StatusMethodNotAllowed, "the provider mirror is read-only"}
	}
	notFound := &httpError{http.StatusNotFound, fmt.Sprintf("%s is not in this provider mirror", r.URL.Path)}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) != 4 {
		return notFound
	}
	host, ns, typ, file := parts[0], parts[1], parts[2], parts[3]
	addr := ProviderAddress{Hostname: host, Namespace: ns, Type: typ}
	if addr.validate() != nil || strings.HasPrefix(file, ".") || strings.ContainsAny(file, `/\`) {
		return notFound
	}
	var contentType string
	switch {
	case file == "index.json":
		contentType = "application/json"
	case strings.HasSuffix(file, ".json"):
		if validateVersion(strings.TrimSuffix(file, ".json")) != nil {
			return notFound
		}
		contentType = "application/json"
	case strings.HasPrefix(file, "terraform-provider-") && strings.HasSuffix(file, ".zip"):
		contentType = "application/zip"
	default:
		return notFound
	}
	f, err := os.Open(filepath.Join(ProviderDir(p.dir, addr), file))
	if errors.Is(err, fs.ErrNotExist) {
		return notFound
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return notFound
	}
	w.Header().Set("Content-Type", contentType)
	http.ServeContent(w, r, "", st.ModTime(), f)
	return nil
}
