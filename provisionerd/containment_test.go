package provisionerd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/codersdk"
	"airgapcoder/internal/connecttrace"
	"airgapcoder/internal/upstreamtest"
	"airgapcoder/provisionerd"
)

// tracedTerraform returns a terraform that records every connect() of
// terraform and what it starts in the returned file.
func tracedTerraform(t *testing.T) (path, trace string) {
	t.Helper()
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatal("strace is needed (scripts/install-deps.sh installs it)")
	}
	dir := t.TempDir()
	trace = filepath.Join(dir, "connect.trace")
	path = filepath.Join(dir, "terraform")
	script := "#!/bin/sh\nexec strace -f -qq -e trace=connect -o " + trace + ".$$ " + terraformPath(t) + " \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, trace
}

// nonLoopbackConnects returns the connect() calls in the traces (trace.*)
// that went anywhere but loopback or a unix socket, and how many there
// were in all.
func nonLoopbackConnects(t *testing.T, trace string) (bad []string, total int) {
	t.Helper()
	files, _ := filepath.Glob(trace + ".*")
	r, err := connecttrace.Read(files...)
	if err != nil {
		t.Fatal(err)
	}
	return r.Offenders, r.Total
}

// TestImportPreflightRefusesWhatTheMirrorLacks: an import of a template
// that needs providers and a module the mirror does not hold is refused
// before terraform runs, with one message naming all of them and the
// bundle.yaml lines to add; nothing is looked up (this test is not in a
// network namespace: the host's resolver is reachable).
func TestImportPreflightRefusesWhatTheMirrorLacks(t *testing.T) {
	tf, trace := tracedTerraform(t)
	f := newFakeCoderd(t)
	f.startDaemon(t, func(o *provisionerd.Options) { o.TerraformPath = tf })
	res := f.run(t, importJob, map[string]string{"main.tf": upstreamtest.QuickstartTemplate})
	msg := mustFailBeforeInit(t, res,
		"registry.terraform.io/kreuzwerker/docker", "registry.terraform.io/hashicorp/external",
		"registry.coder.com/coder/code-server/coder ~> 1.0", "main.tf:",
		"providers:\n  - source: registry.terraform.io/hashicorp/external\n    versions: [\"VERSION\"]",
		"modules:\n  - source: registry.coder.com/coder/code-server/coder\n    version: \"~> 1.0\"",
		"coder bundle build -f bundle.yaml --against inventory.json",
	)
	if strings.Contains(msg, "registry.terraform.io/coder/coder") {
		t.Errorf("the refusal names the provider the mirror holds:\n%s", msg)
	}
	if bad, _ := nonLoopbackConnects(t, trace); len(bad) > 0 {
		t.Errorf("connect() beyond loopback:\n%s", strings.Join(bad, "\n"))
	}
}

// TestContainment: what the preflight does not see (a build of a template
// whose module comes from a registry host nobody mirrors) terraform still
// cannot fetch: its service discovery goes to the egress proxy, which
// refuses it on loopback and says so in the job's log; under strace, no
// connect() of terraform leaves loopback, DNS included.
func TestContainment(t *testing.T) {
	tf, trace := tracedTerraform(t)
	f := newFakeCoderd(t)
	f.startDaemon(t, func(o *provisionerd.Options) { o.TerraformPath = tf })
	build := codersdk.AcquiredJob{Type: codersdk.ProvisionerJobTypeWorkspaceBuild, Transition: codersdk.WorkspaceTransitionStart,
		WorkspaceName: "w", WorkspaceID: "ws-1", WorkspaceOwner: "alice", TemplateName: "t"}
	res := f.run(t, build, map[string]string{"main.tf": coderTF + `
module "x" {
  source  = "modules.example.org/acme/x/coder"
  version = "1.0.0"
}
`})
	mustFail(t, res)
	logs := res.LogText()
	if !strings.Contains(logs, "Refused: terraform (or a provider, or git) tried to reach modules.example.org:443") {
		t.Errorf("the job's log does not name the refused host:\n%s", logs)
	}
	bad, total := nonLoopbackConnects(t, trace)
	if total == 0 {
		t.Fatalf("strace recorded no connect() of terraform at all: the trace did not see it")
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d connect() calls of terraform left loopback:\n%s", len(bad), total, strings.Join(bad, "\n"))
	}
}
