package airgapcoder_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite the generated parts of docs/ (make docs)")

// graphBegin and graphEnd delimit the generated package graph in
// docs/architecture.md.
const (
	graphDoc   = "docs/architecture.md"
	graphBegin = "<!-- BEGIN generated package graph: make docs -->"
	graphEnd   = "<!-- END generated package graph -->"
)

// TestArchitecturePackageGraph fails when the package graph in
// docs/architecture.md is not what `go list` says the code imports; `make
// docs` (go test -run TestArchitecturePackageGraph -update .) rewrites it.
func TestArchitecturePackageGraph(t *testing.T) {
	got := packageGraph(t)
	doc, err := os.ReadFile(graphDoc)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := bytes.Cut(doc, []byte(graphBegin))
	_, after, ok2 := bytes.Cut(rest, []byte(graphEnd))
	if !ok || !ok2 {
		t.Fatalf("%s has no %q ... %q block for the generated package graph", graphDoc, graphBegin, graphEnd)
	}
	block := graphBegin + "\n```\n" + got + "```\n" + graphEnd
	if *updateDocs {
		out := slices.Concat(before, []byte(block), after)
		if err := os.WriteFile(graphDoc, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Contains(doc, []byte(block)) {
		t.Errorf("the package graph in %s is stale; run `make docs` and commit the result. It should be:\n%s", graphDoc, got)
	}
}

// packageGraph lists, for each package of the module that is not a test
// helper, the module's packages it imports directly, one line each:
//
//	coderd -> codersdk, coderd/database, relayconn
func packageGraph(t *testing.T) string {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goBin, "list", "-f", "{{.ImportPath}}\t{{join .Imports \",\"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	const mod = "airgapcoder/"
	testOnly := func(p string) bool {
		return strings.HasPrefix(p, "internal/test") || strings.HasSuffix(p, "test") || p == "internal/golden" ||
			p == "internal/syncbuf" || p == "internal/upstreamtest" || p == "internal/coderprovider" || p == "bench" || strings.HasPrefix(p, "bench/")
	}
	var b strings.Builder
	width := 0
	type row struct {
		pkg  string
		deps []string
	}
	var rows []row
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), "\t")
		pkg = strings.TrimPrefix(pkg, mod)
		if pkg == "airgapcoder" || testOnly(pkg) {
			continue
		}
		var deps []string
		for _, imp := range strings.Split(imports, ",") {
			if d, ok := strings.CutPrefix(imp, mod); ok && !testOnly(d) {
				deps = append(deps, d)
			}
		}
		slices.Sort(deps)
		rows = append(rows, row{pkg, deps})
		width = max(width, len(pkg))
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.pkg, b.pkg) })
	for _, r := range rows {
		deps := "(module leaf)"
		if len(r.deps) > 0 {
			deps = strings.Join(r.deps, ", ")
		}
		// Wrap long lists under the first dependency.
		line := fmt.Sprintf("%-*s -> ", width, r.pkg)
		indent := strings.Repeat(" ", len(line))
		for i, d := range strings.Split(deps, ", ") {
			if i > 0 {
				if len(line)+len(d)+2 > 100 {
					b.WriteString(line + ",\n")
					line = indent + d
					continue
				}
				line += ", "
			}
			line += d
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
