package mirror

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// ServedRef returns the reference under which registry (such as
// "127.0.0.1:8443", or "registry.corp/prefix" after push-images) serves r:
// REGISTRY/HOST/PATH:TAG (or @DIGEST), the host's ":port" written "_port".
func ServedRef(registry string, r ImageRef) string {
	return strings.TrimSuffix(registry, "/") + "/" + r.Repository() + r.tagAndDigest()
}

// RewriteImageRefs rewrites, in every *.tf file under dir (in place, folders
// named .terraform skipped), each quoted string literal that names one of
// refs to the reference registry serves it under (see ServedRef). A literal
// names a ref when it is exactly the ref as written, or when it carries an
// explicit tag or digest and normalises to the same image ("alpine:3.20" and
// "docker.io/library/alpine:3.20" name the same image; a bare "alpine" only
// matches a ref written "alpine"). Only whole literals are replaced, never
// substrings, comments or heredocs; files without a match are left
// untouched. A literal pinned by digest ("repo@sha256:…", with or without a
// tag) is rewritten when its repository is one of refs'. It returns the number of replacements per file (slash-separated
// path relative to dir), for files with at least one.
func RewriteImageRefs(dir string, refs []string, registry string) (map[string]int, error) {
	registry = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(registry, "https://"), "http://"), "/")
	if registry == "" {
		return nil, fmt.Errorf("rewrite image references: no registry")
	}
	exact := map[string]string{}
	normal := map[ImageRef]string{}
	repos := map[string]bool{} // HOST/PATH of every ref
	for _, ref := range refs {
		r, err := ParseImageRef(ref)
		if err != nil {
			return nil, fmt.Errorf("rewrite image references: %w", err)
		}
		served := ServedRef(registry, r)
		exact[ref] = served
		normal[r] = served
		repos[r.Host+"/"+r.Path] = true
	}
	lookup := func(lit string) (string, bool) {
		if s, ok := exact[lit]; ok {
			return s, true
		}
		if !hasExplicitVersion(lit) {
			return "", false
		}
		r, err := ParseImageRef(lit)
		if err != nil {
			return "", false
		}
		if s, ok := normal[r]; ok {
			return s, true
		}
		// A reference pinned by digest names content, not a tag: it is
		// served from the mirror when its repository is bundled (a digest
		// the bundle lacks fails the pull there, as it would offline).
		if r.Digest != "" && repos[r.Host+"/"+r.Path] {
			return ServedRef(registry, r), true
		}
		return "", false
	}

	counts := map[string]int{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".terraform" && p != dir {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), ".tf") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out, n, err := rewriteLiterals(src, p, lookup)
		if err != nil || n == 0 {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := os.WriteFile(p, out, info.Mode().Perm()); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		counts[filepath.ToSlash(rel)] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rewrite image references: %w", err)
	}
	return counts, nil
}

// hasExplicitVersion reports whether ref names a tag or a digest.
func hasExplicitVersion(ref string) bool {
	return strings.Contains(ref, "@") || strings.LastIndex(ref, ":") > strings.LastIndex(ref, "/")
}

// rewriteLiterals replaces, in HCL source src, the content of every quoted
// string literal ("..." made of one literal token) for which lookup answers.
func rewriteLiterals(src []byte, filename string, lookup func(string) (string, bool)) ([]byte, int, error) {
	toks, diags := hclsyntax.LexConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, 0, diags
	}
	var out bytes.Buffer
	last, n := 0, 0
	for i := 0; i+2 < len(toks); i++ {
		if toks[i].Type != hclsyntax.TokenOQuote || toks[i+1].Type != hclsyntax.TokenQuotedLit || toks[i+2].Type != hclsyntax.TokenCQuote {
			continue
		}
		lit := toks[i+1]
		served, ok := lookup(string(lit.Bytes))
		if !ok {
			continue
		}
		out.Write(src[last:lit.Range.Start.Byte])
		out.WriteString(served)
		last = lit.Range.End.Byte
		n++
		i += 2
	}
	if n == 0 {
		return src, 0, nil
	}
	out.Write(src[last:])
	return out.Bytes(), n, nil
}
