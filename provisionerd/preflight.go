package provisionerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"strings"

	"airgapcoder/internal/templateneeds"
	"airgapcoder/mirror"
)

// The import preflight: before terraform runs on a template, every
// provider it requires must be in the provider mirror and every registry
// module it calls in the module mirror (templateneeds). A template that
// needs anything else is refused with one message that names all of it and
// the bundle.yaml lines that would bring it, rather than terraform's first
// failure, and terraform never gets the chance to look for it elsewhere.

// preflight checks the template in src against the daemon's mirrors.
func (d *Daemon) preflight(ctx context.Context, src string) error {
	needs, err := templateneeds.Inspect(src, src)
	if err != nil {
		return fmt.Errorf("read template: %w", err)
	}
	lacks, err := needs.Lacks(ctx, mirrorCatalog{d: d})
	if err != nil {
		return fmt.Errorf("check the template against the mirror: %w", err)
	}
	if len(lacks) > 0 {
		where := "the provider mirror " + d.opts.ProviderMirror
		if d.opts.ProviderMirror == "" {
			where = "this provisioner (it has no provider mirror)"
		}
		if d.opts.ModuleMirror != "" {
			where += " and the module mirror " + d.opts.ModuleMirror
		}
		return &templateneeds.MissingError{Where: where, Lacks: lacks}
	}
	return nil
}

// mirrorCatalog answers templateneeds from the daemon's provider mirror (a
// folder, or a network mirror's index.json) and module mirror (its
// versions endpoint).
type mirrorCatalog struct{ d *Daemon }

func (c mirrorCatalog) ProviderVersions(ctx context.Context, address string) ([]string, error) {
	addr, err := mirror.ParseProviderAddress(address)
	if err != nil {
		return nil, err
	}
	pm := c.d.opts.ProviderMirror
	var idx mirror.Index
	switch {
	case pm == "":
		return nil, nil
	case strings.HasPrefix(pm, "https://"):
		found, err := getJSON(ctx, c.d.mirrorClient, strings.TrimSuffix(pm, "/")+"/"+addr.String()+"/index.json", &idx)
		if err != nil || !found {
			return nil, err
		}
	default:
		if idx, err = mirror.ReadIndex(pm, addr); errors.Is(err, fs.ErrNotExist) {
			return folderVersions(pm, addr)
		} else if err != nil {
			return nil, err
		}
	}
	var out []string
	for v := range idx.Versions {
		out = append(out, v)
	}
	return out, nil
}

// folderVersions lists the versions of a filesystem mirror without
// index.json (terraform's packed layout: terraform-provider-TYPE_VERSION_OS_ARCH.zip,
// or its unpacked one: VERSION/OS_ARCH/).
func folderVersions(dir string, addr mirror.ProviderAddress) ([]string, error) {
	entries, err := os.ReadDir(mirror.ProviderDir(dir, addr))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	prefix := "terraform-provider-" + addr.Type + "_"
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.IsDir():
			out = append(out, name)
		case strings.HasPrefix(name, prefix) && strings.HasSuffix(name, ".zip"):
			if v, _, ok := strings.Cut(strings.TrimPrefix(name, prefix), "_"); ok {
				out = append(out, v)
			}
		}
	}
	return out, nil
}

func (c mirrorCatalog) ModuleVersions(ctx context.Context, source string) ([]string, error) {
	if c.d.opts.ModuleMirror == "" {
		return nil, nil
	}
	var body struct {
		Modules []struct {
			Versions []struct {
				Version string `json:"version"`
			} `json:"versions"`
		} `json:"modules"`
	}
	found, err := getJSON(ctx, c.d.mirrorClient, strings.TrimSuffix(c.d.opts.ModuleMirror, "/")+"/"+source+"/versions", &body)
	if err != nil || !found {
		return nil, err
	}
	var out []string
	for _, m := range body.Modules {
		for _, v := range m.Versions {
			out = append(out, v.Version)
		}
	}
	return out, nil
}

// getJSON decodes url's JSON into v; found is false on 404.
func getJSON(ctx context.Context, client *http.Client, url string, v any) (found bool, err error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			return false, fmt.Errorf("%s: %w", url, err)
		}
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("%s: %s", url, resp.Status)
}
