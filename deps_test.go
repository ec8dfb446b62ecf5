package airgapcoder_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// depRule forbids a package from linking some others, directly or through
// anything it imports.
type depRule struct {
	pkg string
	why string
	// forbidden matches import paths by prefix ("x" matches x and x/...);
	// allowed lists exceptions, and stdlibOnly forbids every non-standard
	// package not in allowed.
	forbidden  []string
	allowed    []string
	stdlibOnly bool
}

// depRules is the import graph the architecture promises (see
// docs/architecture.md, "Package graph").
var depRules = []depRule{
	{
		pkg: "airgapcoder/relayconn", why: "the relay transport is a leaf under codersdk, coderd, the agent and the CLI: bytes and connections, no API types, no server",
		stdlibOnly: true,
	},
	{
		pkg: "airgapcoder/relaymux", why: "the yamux settings of a relay session are a leaf every relay end links",
		stdlibOnly: true, allowed: []string{"github.com/hashicorp/yamux", "airgapcoder/relayconn"},
	},
	{
		pkg: "airgapcoder/codersdk", why: "the API types and client are a leaf every component links",
		stdlibOnly: true, allowed: []string{"github.com/coder/websocket", "airgapcoder/relayconn"},
	},
	{
		pkg: "airgapcoder/agent", why: "the agent talks to coderd only through codersdk",
		forbidden: []string{"airgapcoder/coderd", "airgapcoder/provisionerd", "github.com/gin-gonic", "github.com/jackc/pgx"},
		allowed:   []string{"airgapcoder/codersdk"},
	},
	{
		pkg: "airgapcoder/provisionerd", why: "provisioner daemons talk to coderd only through codersdk",
		forbidden: []string{"airgapcoder/coderd", "github.com/gin-gonic", "github.com/jackc/pgx"},
		allowed:   []string{"airgapcoder/codersdk"},
	},
	{
		pkg: "airgapcoder/coderd", why: "coderd is the API and its state: it runs no Terraform and starts no PostgreSQL",
		forbidden: []string{"airgapcoder/provisionerd", "airgapcoder/postgres", "airgapcoder/terraform",
			"github.com/hashicorp/hc-install", "github.com/hashicorp/terraform-exec", "github.com/fergusstrange/embedded-postgres"},
	},
	{
		pkg: "airgapcoder/coderd/parameters", why: "the parameter rules (order, options, validation) are shared by coderd and the CLI: pure, no server, no database",
		forbidden: []string{"airgapcoder/coderd", "airgapcoder/controlplane", "github.com/gin-gonic", "github.com/jackc/pgx"},
	},
	{
		pkg: "airgapcoder/bundle", why: "the bundle format is read offline: no HTTP client, registry or database code",
		forbidden: []string{"net/http", "github.com/google/go-containerregistry", "github.com/jackc/pgx",
			"github.com/hashicorp/hc-install", "github.com/hashicorp/terraform-exec", "github.com/fergusstrange/embedded-postgres",
			"airgapcoder/postgres", "airgapcoder/terraform", "airgapcoder/provisionerd", "airgapcoder/mirror", "airgapcoder/coderd"},
	},
	{
		pkg: "airgapcoder/appliance", why: "the offline host installs and runs bundles; building them is for the connected host",
		forbidden: []string{"airgapcoder/bundle/builder"},
	},
	{
		pkg: "airgapcoder/mirror", why: "the mirror is handed its certificate; the certificate folder is certs' business",
		forbidden: []string{"airgapcoder/certs"},
	},
	{
		pkg: "airgapcoder/coderd/auditjournal", why: "the journal's format cannot follow the database's row type: it links no other package of the module",
		forbidden: []string{"airgapcoder"},
	},
	{
		pkg: "airgapcoder/internal/appproxy", why: "the rewriting of app requests is shared by coderd and the workspace proxy: no server, no database",
		forbidden: []string{"airgapcoder/coderd", "airgapcoder/wsproxy", "github.com/gin-gonic", "github.com/jackc/pgx"},
	},
	{
		pkg: "airgapcoder/internal/clockwait", why: "waiting on the injectable clock is shared by coderd, the control plane, the agent, provisionerd and the workspace proxy: a leaf",
		stdlibOnly: true, allowed: []string{"github.com/coder/quartz", "github.com/cenkalti/backoff"},
	},
	{
		pkg: "airgapcoder/wsproxy", why: "a workspace proxy reaches the deployment only through its API and never its database",
		forbidden: []string{"airgapcoder/coderd", "airgapcoder/postgres", "github.com/jackc/pgx"},
	},
}

// TestDependencies checks the import graph with `go list -deps`, as the
// build sees it, and names the chain that brings a forbidden package in.
func TestDependencies(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	for _, r := range depRules {
		t.Run(strings.TrimPrefix(r.pkg, "airgapcoder/"), func(t *testing.T) {
			out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}\t{{.Standard}}\t{{join .Imports \",\"}}", r.pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", r.pkg, err)
			}
			imports := map[string][]string{}
			standard := map[string]bool{}
			var deps []string
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				f := strings.Split(sc.Text(), "\t")
				if len(f) != 3 {
					continue
				}
				deps = append(deps, f[0])
				standard[f[0]] = f[1] == "true"
				if f[2] != "" {
					imports[f[0]] = strings.Split(f[2], ",")
				}
			}
			for _, d := range deps {
				if d == r.pkg || !r.forbids(d, standard[d]) {
					continue
				}
				c := chain(imports, r.pkg, d)
				// Name only where the forbidden part enters, not all it
				// brings along.
				if slices.ContainsFunc(c[1:len(c)-1], func(p string) bool { return r.forbids(p, standard[p]) }) {
					continue
				}
				t.Errorf("%s links %s (%s): %s", r.pkg, d, r.why, strings.Join(c, " -> "))
			}
		})
	}
}

func (r depRule) forbids(path string, std bool) bool {
	under := func(prefixes []string) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool { return path == p || strings.HasPrefix(path, p+"/") })
	}
	if under(r.allowed) {
		return false
	}
	if r.stdlibOnly && !std && !strings.HasPrefix(path, r.pkg) {
		return true
	}
	return under(r.forbidden)
}

// chain is the shortest import path from one package to another.
func chain(imports map[string][]string, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var path []string
			for ; p != ""; p = prev[p] {
				path = append([]string{p}, path...)
			}
			return path
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{from, "...", to}
}
