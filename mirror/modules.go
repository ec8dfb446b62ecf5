package mirror

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-version"
)

// The module registry: Terraform's module registry protocol (modules.v1)
// over the module packages a bundle carries, so that a template's
// `source = "registry.coder.com/coder/code-server/coder"` resolves unchanged
// offline. Provisioners point each bundled registry host's modules.v1 at
// ModulesPath + HOST + "/" with a `host` block in their CLI configuration
// (provisionerd.cliConfig); terraform then asks:
//
//	GET ModulesPath                                   {"hosts": [...]} (for provisioners)
//	GET ModulesPath HOST/NS/NAME/SYSTEM/versions      the bundled versions
//	GET ModulesPath HOST/NS/NAME/SYSTEM/VERSION/download
//	                                                  204, X-Terraform-Get: the package's https URL
//	                                                  (+ "//SUBDIR" when the module is not at its root)
//	GET ModulesPath HOST/NS/NAME/SYSTEM/VERSION.tar.gz the package
//
// The packages and ModulesIndexFile are written by bundle build.

// ModulesPath is the URL path of the module registry.
const ModulesPath = "/terraform/modules/"

// ModulesDir is the bundle folder of module packages, and ModulesIndexFile
// the file in it that lists them.
const (
	ModulesDir       = "modules"
	ModulesIndexFile = "index.json"
)

// ModuleEntry is one module package of ModulesIndexFile.
type ModuleEntry struct {
	// Source is HOST/NAMESPACE/NAME/SYSTEM.
	Source  string `json:"source"`
	Version string `json:"version"`
	// Subdir is the module's folder in the package, "" for its root.
	Subdir string `json:"subdir,omitempty"`
}

// ModulesIndex is the content of ModulesIndexFile.
type ModulesIndex struct {
	Modules []ModuleEntry `json:"modules"`
}

// moduleSource matches HOST/NAMESPACE/NAME/SYSTEM with a host.
var moduleSource = regexp.MustCompile(`^[a-z0-9.-]+(:[0-9]+)?/[A-Za-z0-9][A-Za-z0-9_-]*/[A-Za-z0-9][A-Za-z0-9_-]*/[a-z0-9]+$`)

// ParseModuleSource checks a registry module address and returns it with
// the default host when it has none (NAMESPACE/NAME/SYSTEM is a module of
// registry.terraform.io, as terraform reads it) and the host in lower case.
func ParseModuleSource(s string) (string, error) {
	parts := strings.Split(s, "/")
	if len(parts) == 3 {
		parts = append([]string{DefaultProviderHost}, parts...)
	}
	if len(parts) == 4 {
		parts[0] = strings.ToLower(parts[0])
	}
	out := strings.Join(parts, "/")
	if !moduleSource.MatchString(out) {
		return "", fmt.Errorf("%q is not a registry module address (HOST/NAMESPACE/NAME/SYSTEM, such as registry.coder.com/coder/code-server/coder)", s)
	}
	return out, nil
}

// ReadModulesIndex reads dir/ModulesIndexFile; a missing one is an empty
// index.
func ReadModulesIndex(dir string) (ModulesIndex, error) {
	var idx ModulesIndex
	b, err := os.ReadFile(filepath.Join(dir, ModulesIndexFile))
	if errors.Is(err, fs.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return idx, err
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return idx, fmt.Errorf("read %s: %w", filepath.Join(dir, ModulesIndexFile), err)
	}
	for _, m := range idx.Modules {
		if _, err := ParseModuleSource(m.Source); err != nil || strings.Count(m.Source, "/") != 3 {
			return idx, fmt.Errorf("read %s: module %q: not HOST/NAMESPACE/NAME/SYSTEM", ModulesIndexFile, m.Source)
		}
		if _, err := version.NewSemver(m.Version); err != nil {
			return idx, fmt.Errorf("read %s: module %s: version %q: %w", ModulesIndexFile, m.Source, m.Version, err)
		}
	}
	return idx, nil
}

// Hosts returns the registry hosts the index has modules of, sorted.
func (idx ModulesIndex) Hosts() []string {
	var hosts []string
	for _, m := range idx.Modules {
		h, _, _ := strings.Cut(m.Source, "/")
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// ModuleHandler serves the module registry over the packages in dir
// (StripPrefix ModulesPath's trailing slash off first, as for
// ProviderHandler). The index is read once, here.
func ModuleHandler(dir string) (http.Handler, error) {
	idx, err := ReadModulesIndex(dir)
	if err != nil {
		return nil, fmt.Errorf("mirror: modules: %w", err)
	}
	return &moduleHandler{dir: dir, idx: idx}, nil
}

type moduleHandler struct {
	dir string
	idx ModulesIndex
}

func (h *moduleHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		moduleError(w, http.StatusMethodNotAllowed, "the module registry is read-only")
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/")
	if rest == "" {
		respondJSON(w, http.StatusOK, map[string]any{"hosts": nonNil(h.idx.Hosts())})
		return
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 5 {
		moduleError(w, http.StatusNotFound, "not a module registry path: "+r.URL.Path)
		return
	}
	source := strings.Join(parts[:4], "/")
	var mods []ModuleEntry
	for _, m := range h.idx.Modules {
		if m.Source == source {
			mods = append(mods, m)
		}
	}
	if len(mods) == 0 {
		moduleError(w, http.StatusNotFound, "module "+source+" is not in this mirror")
		return
	}
	find := func(v string) (ModuleEntry, bool) {
		i := slices.IndexFunc(mods, func(m ModuleEntry) bool { return m.Version == v })
		if i < 0 {
			return ModuleEntry{}, false
		}
		return mods[i], true
	}
	switch tail := parts[4:]; {
	case len(tail) == 1 && tail[0] == "versions":
		var vs []map[string]string
		for _, m := range mods {
			vs = append(vs, map[string]string{"version": m.Version})
		}
		respondJSON(w, http.StatusOK, map[string]any{"modules": []any{map[string]any{"versions": vs}}})
	case len(tail) == 2 && tail[1] == "download":
		m, ok := find(tail[0])
		if !ok {
			moduleError(w, http.StatusNotFound, "module "+source+" "+tail[0]+" is not in this mirror")
			return
		}
		scheme := "https"
		if r.TLS == nil {
			scheme = "http"
		}
		get := scheme + "://" + r.Host + ModulesPath + m.Source + "/" + m.Version + ".tar.gz"
		if m.Subdir != "" {
			get += "//" + m.Subdir
		}
		w.Header().Set("X-Terraform-Get", get)
		w.WriteHeader(http.StatusNoContent)
	case len(tail) == 1 && strings.HasSuffix(tail[0], ".tar.gz"):
		m, ok := find(strings.TrimSuffix(tail[0], ".tar.gz"))
		if !ok {
			moduleError(w, http.StatusNotFound, "module package "+rest+" is not in this mirror")
			return
		}
		f, err := os.Open(filepath.Join(h.dir, filepath.FromSlash(m.Source), m.Version+".tar.gz"))
		if err != nil {
			moduleError(w, http.StatusNotFound, "module package "+rest+" is missing: reinstall the bundle")
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/gzip")
		http.ServeContent(w, r, "", time.Time{}, f)
	default:
		moduleError(w, http.StatusNotFound, "not a module registry path: "+r.URL.Path)
	}
}

// moduleError answers as registries do: {"errors": ["message"]}.
func moduleError(w http.ResponseWriter, status int, msg string) {
	respondJSON(w, status, map[string]any{"errors": []string{msg}})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
