package builder

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-version"

	"airgapcoder/bundle"
	"airgapcoder/internal/templateneeds"
	"airgapcoder/internal/templatetar"
	"airgapcoder/mirror"
)

// Modules: Terraform registry modules go into modules/ so that templates
// that call them (`source = "registry.coder.com/coder/code-server/coder"`)
// build offline unchanged: the mirror serves them under the module registry
// protocol (mirror/modules.go) and provisioners point each module host at
// it.
//
// A registry entry is fetched through the module registry protocol:
// service discovery (/.well-known/terraform.json, modules.v1), the
// versions list (the newest version that meets the entry's constraint is
// taken), and the download endpoint, whose X-Terraform-Get (or JSON
// "location") says where the package is: an https archive (.tar.gz, .tgz,
// .zip, or ?archive=) fetched with the build's HTTP client, or a git::
// source cloned with the git client (?ref= a tag, branch or commit). A
// "//subdir" is kept as the module's folder inside the package. A local
// entry (path:) is the folder itself, served at its exact version.
//
// Each package is stored as a deterministic tar.gz (templatetar.Pack: no
// .terraform, no state, no symlink out of the folder; .git is left out)
// at bundle.ModulePath, and modules/index.json lists them for the mirror.
// Then every bundled module's own module calls are checked as a template's
// are: registry modules must be bundled in a version that meets their
// constraint, local ones must stay inside the package, anything else is an
// error (terraform could not fetch it offline).

// maxModulePackage bounds a module package, downloaded or packed.
const maxModulePackage = 512 << 20

// fetchedModule is a bundled module and its unpacked package.
type fetchedModule struct {
	bundle.Module
	dir string // the package, unpacked
	src ModuleSource
}

func (b *builder) fetchModules(ctx context.Context) error {
	if len(b.cfg.Modules) == 0 {
		return nil
	}
	work, err := os.MkdirTemp("", "coder-bundle-modules-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	b.gitCA = sync.OnceValues(func() (string, error) { return b.writeGitCA(work) })
	mods := make([]fetchedModule, len(b.cfg.Modules))
	g := newGroup(ctx)
	for i, src := range b.cfg.Modules {
		g.Go(func(ctx context.Context) error {
			dir := filepath.Join(work, fmt.Sprint(i))
			m, err := b.fetchModule(ctx, src, dir)
			if err != nil {
				return fmt.Errorf("%s: module %s: %w", src.Origin, src.Source, err)
			}
			mods[i] = fetchedModule{Module: m, dir: dir, src: src}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	idx := mirror.ModulesIndex{}
	b.mu.Lock()
	for _, m := range mods {
		b.comp.Modules = append(b.comp.Modules, m.Module)
		idx.Modules = append(idx.Modules, mirror.ModuleEntry{Source: m.Source, Version: m.Version, Subdir: m.Subdir})
	}
	b.mu.Unlock()
	raw, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	if err := b.writePayload(bundle.DirModules+"/"+mirror.ModulesIndexFile, append(raw, '\n')); err != nil {
		return err
	}
	// What the modules call must come along too.
	for _, m := range mods {
		needs, err := templateneeds.Inspect(m.dir, filepath.Join(m.dir, filepath.FromSlash(m.Subdir)))
		if err != nil {
			return fmt.Errorf("%s: module %s %s: %w", m.src.Origin, m.Source, m.Version, err)
		}
		if len(needs.Remote) > 0 {
			r := needs.Remote[0]
			return fmt.Errorf("%s: module %s %s: %s comes from %q, which terraform cannot fetch offline", m.src.Origin, m.Source, m.Version, r.Pos, r.Source)
		}
		for _, call := range needs.Modules {
			if _, err := b.pickModuleVersion(call.Source, call.Version); err != nil {
				return fmt.Errorf("%s: module %s %s: %s: %w", m.src.Origin, m.Source, m.Version, call.Pos, err)
			}
		}
	}
	return nil
}

// pickModuleVersion returns the bundled version of source that meets
// constraint ("" for any), the newest when several do.
func (b *builder) pickModuleVersion(source, constraint string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var cons version.Constraints
	if constraint != "" {
		c, err := version.NewConstraint(constraint)
		if err != nil {
			return "", fmt.Errorf("module %s: version %q is not a constraint: %v", source, constraint, err)
		}
		cons = c
	}
	var best *version.Version
	var have []string
	for _, m := range b.comp.Modules {
		if m.Source != source {
			continue
		}
		have = append(have, m.Version)
		v, err := version.NewVersion(m.Version)
		if err != nil || (cons != nil && !cons.Check(v)) {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best = v
		}
	}
	want := ""
	if constraint != "" {
		want = " (version " + constraint + ")"
	}
	switch {
	case best != nil:
		return best.Original(), nil
	case len(have) > 0:
		return "", fmt.Errorf("module %s%s: the bundle carries %s, which does not meet it; change modules: in bundle.yaml", source, want, strings.Join(have, ", "))
	}
	return "", fmt.Errorf("module %s%s is not in the bundle: add it to modules: in bundle.yaml", source, want)
}

// fetchModule fetches one modules entry into dir and stages its package.
func (b *builder) fetchModule(ctx context.Context, src ModuleSource, dir string) (bundle.Module, error) {
	m := bundle.Module{Source: src.Source, Version: src.Version}
	if src.Path != "" {
		m.Upstream = src.Path
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return m, err
		}
		if err := copyFolder(src.Path, dir); err != nil {
			return m, err
		}
	} else {
		v, location, err := b.resolveModule(ctx, src)
		if err != nil {
			return m, err
		}
		m.Version, m.Upstream = v, location
		if m.Subdir, err = b.fetchModulePackage(ctx, location, dir); err != nil {
			return m, fmt.Errorf("%s %s from %s: %w", src.Source, v, location, err)
		}
		if st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(m.Subdir))); err != nil || !st.IsDir() {
			return m, fmt.Errorf("%s %s from %s: the package has no folder %q", src.Source, v, location, m.Subdir)
		}
	}
	m.Path = bundle.ModulePath(m.Source, m.Version)
	var tgz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&tgz, gzip.BestCompression)
	if err := templatetar.Pack(dir, zw, maxModulePackage); err != nil {
		return m, fmt.Errorf("pack %s %s: %w", src.Source, m.Version, err)
	}
	if err := zw.Close(); err != nil {
		return m, err
	}
	if err := b.writePayload(m.Path, tgz.Bytes()); err != nil {
		return m, err
	}
	b.progress.logf("module %s %s (%s)", m.Source, m.Version, m.Upstream)
	return m, nil
}

// resolveModule finds the newest version of a registry module that meets
// the entry's constraint and where its package is.
func (b *builder) resolveModule(ctx context.Context, src ModuleSource) (string, string, error) {
	host, rest, _ := strings.Cut(src.Source, "/")
	base, err := b.serviceDiscovery(ctx, host, "modules.v1")
	if err != nil {
		return "", "", err
	}
	versionsURL, _ := base.Parse(rest + "/versions")
	var list struct {
		Modules []struct {
			Versions []struct {
				Version string `json:"version"`
			} `json:"versions"`
		} `json:"modules"`
	}
	if err := b.getJSON(ctx, versionsURL.String(), &list); err != nil {
		return "", "", err
	}
	cons, err := version.NewConstraint(src.Version)
	if err != nil {
		return "", "", err
	}
	var best *version.Version
	var offered []string
	for _, m := range list.Modules {
		for _, mv := range m.Versions {
			v, err := version.NewVersion(mv.Version)
			if err != nil {
				continue
			}
			offered = append(offered, mv.Version)
			if cons.Check(v) && (best == nil || v.GreaterThan(best)) {
				best = v
			}
		}
	}
	if best == nil {
		return "", "", fmt.Errorf("no version meets %q (the registry has %s)", src.Version, orNone(offered))
	}
	downloadURL, _ := base.Parse(rest + "/" + best.Original() + "/download")
	resp, err := b.get(ctx, downloadURL.String(), "application/json")
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	location := resp.Header.Get("X-Terraform-Get")
	if location == "" && resp.StatusCode == http.StatusOK {
		var body struct {
			Location string `json:"location"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err == nil {
			location = body.Location
		}
	}
	if location == "" {
		return "", "", fmt.Errorf("%s: no X-Terraform-Get header or location", downloadURL)
	}
	// A relative location is relative to the download URL, as terraform
	// reads it.
	if strings.HasPrefix(location, "/") || strings.HasPrefix(location, "./") || strings.HasPrefix(location, "../") {
		u, err := downloadURL.Parse(location)
		if err != nil {
			return "", "", fmt.Errorf("%s: location %q: %w", downloadURL, location, err)
		}
		location = u.String()
	}
	return best.Original(), location, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// splitSubdir splits go-getter's "SOURCE//SUBDIR" (the "//" after the
// scheme's does not count) and cleans SUBDIR.
func splitSubdir(src string) (string, string, error) {
	start := 0
	if i := strings.Index(src, "://"); i >= 0 {
		start = i + 3
	}
	i := strings.Index(src[start:], "//")
	if i < 0 {
		return src, "", nil
	}
	base, sub := src[:start+i], src[start+i+2:]
	query := ""
	if q := strings.IndexByte(sub, '?'); q >= 0 {
		sub, query = sub[:q], sub[q:]
	}
	sub = path.Clean(sub)
	if sub == "." {
		sub = ""
	}
	if path.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, "../") {
		return "", "", fmt.Errorf("subdirectory %q leaves the package", sub)
	}
	return base + query, sub, nil
}

var archiveSuffix = regexp.MustCompile(`\.(tar\.gz|tgz|zip)$`)

// fetchModulePackage fetches the package at location (see the comment at
// the top) into dir and returns the module's folder inside it.
func (b *builder) fetchModulePackage(ctx context.Context, location, dir string) (string, error) {
	src, subdir, err := splitSubdir(location)
	if err != nil {
		return "", err
	}
	if rest, ok := strings.CutPrefix(src, "git::"); ok {
		return subdir, b.cloneModule(ctx, rest, dir)
	}
	u, err := url.Parse(src)
	if err != nil || u.Scheme != "https" {
		return "", errors.New("only https archives (.tar.gz, .tgz, .zip) and git:: sources can be bundled")
	}
	q := u.Query()
	kind := q.Get("archive")
	q.Del("archive")
	u.RawQuery = q.Encode()
	if kind == "" {
		kind = strings.TrimPrefix(archiveSuffix.FindString(u.Path), ".")
	}
	if kind == "" {
		return "", errors.New("the https source is not an archive (.tar.gz, .tgz, .zip, or ?archive=)")
	}
	data, err := b.getSmall(ctx, u.String(), maxModulePackage)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	switch kind {
	case "tar.gz", "tgz":
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return "", fmt.Errorf("unpack: %w", err)
		}
		if err := templatetar.Extract(zr, dir, maxModulePackage); err != nil {
			return "", fmt.Errorf("unpack: %w", err)
		}
	case "zip":
		if err := unzip(data, dir); err != nil {
			return "", fmt.Errorf("unpack: %w", err)
		}
	default:
		return "", fmt.Errorf("archive type %q is not supported (tar.gz, tgz, zip)", kind)
	}
	return subdir, nil
}

// gitURL matches the git sources a bundle may clone: https and ssh URLs,
// and scp-like user@host:path. Never a path or file:// URL on the build
// host: a registry must not make the build pack this machine's files.
var gitURL = regexp.MustCompile(`^(https://|ssh://|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/])`)

// cloneModule clones a git source (?ref= a tag, branch or commit) into dir
// without its .git folder. The build's trust (system roots, SSL_CERT_FILE,
// certs:) and registries: overrides apply to git's https too; proxies come
// from the build's environment, as for everything else.
func (b *builder) cloneModule(ctx context.Context, src, dir string) error {
	u := src
	ref := ""
	if i := strings.IndexByte(src, '?'); i >= 0 {
		q, err := url.ParseQuery(src[i+1:])
		if err != nil {
			return fmt.Errorf("git source %q: %w", src, err)
		}
		ref, u = q.Get("ref"), src[:i]
	}
	if !gitURL.MatchString(u) {
		return fmt.Errorf("git source %q: only https, ssh and user@host:path sources are bundled; a registry may not point the build at this machine's files", u)
	}
	ca, err := b.gitCA()
	if err != nil {
		return err
	}
	cfg := []string{"-c", "protocol.file.allow=never", "-c", "advice.detachedHead=false"}
	for host, base := range b.cfg.Registries {
		cfg = append(cfg, "-c", "url."+base+".insteadOf=https://"+host+"/")
	}
	git := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "git", append(slices.Clone(cfg), args...)...)
		// GIT_SSL_CAINFO, which also overrides any inherited setting.
		cmd.Env = append(slices.Clone(b.opts.Environ), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_SSL_CAINFO="+ca)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := git("clone", "--quiet", "--no-checkout", "--", u, dir); err != nil {
		return err
	}
	target := "HEAD"
	if ref != "" {
		target = ref
	}
	if err := git("-C", dir, "checkout", "--quiet", target); err != nil {
		return fmt.Errorf("ref %q: %w", ref, err)
	}
	return os.RemoveAll(filepath.Join(dir, ".git"))
}

// writeGitCA writes the build's trusted CAs (the system bundle,
// SSL_CERT_FILE, the certs: files) to dir, for git's GIT_SSL_CAINFO.
func (b *builder) writeGitCA(dir string) (string, error) {
	var pem []byte
	for _, f := range systemBundles {
		if data, err := os.ReadFile(f); err == nil {
			pem = append(pem, data...)
			break
		}
	}
	files := slices.Clone(b.certFiles)
	for _, kv := range b.opts.Environ {
		if v, ok := strings.CutPrefix(kv, "SSL_CERT_FILE="); ok && v != "" {
			files = append(files, v)
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		pem = append(append(pem, '\n'), data...)
	}
	p := filepath.Join(dir, "git-ca.pem")
	return p, os.WriteFile(p, pem, 0o644)
}

// unzip extracts a zip archive into dir through an os.Root, so that no
// entry lands outside it.
func unzip(data []byte, dir string) error {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	var total int64
	for _, f := range zr.File {
		name := path.Clean(f.Name)
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%s: leaves the archive's folder", f.Name)
		}
		if f.FileInfo().IsDir() {
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
			continue
		}
		if !f.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file", f.Name)
		}
		if total += int64(f.UncompressedSize64); total > maxModulePackage {
			return fmt.Errorf("unpacks to more than %d bytes", maxModulePackage)
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		mode := os.FileMode(0o644)
		if f.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if err := writeZipEntry(root, name, mode, f); err != nil {
			return err
		}
	}
	return nil
}

func writeZipEntry(root *os.Root, name string, mode os.FileMode, f *zip.File) error {
	rc, err := f.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	w, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, io.LimitReader(rc, int64(f.UncompressedSize64))); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// copyFolder copies a local module folder into dir (eachSourceFile).
func copyFolder(src, dir string) error {
	err := eachSourceFile(src, func(abs, rel string, mode fs.FileMode) error {
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		data, err := os.ReadFile(abs)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, mode)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return nil
}
