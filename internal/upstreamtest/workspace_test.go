package upstreamtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"

	"airgapcoder/internal/testtier"
)

// TestWorkspaceImageReproducible builds the workspace image twice and
// wants one digest, with every layer's entries sorted and dated
// workspaceTime, and the upstream serving that digest under WorkspaceRef
// beside the images it always had.
func TestWorkspaceImageReproducible(t *testing.T) {
	testtier.Heavy(t, "builds a workspace image twice")
	first, pl, err := workspaceIndex()
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := workspaceIndex()
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Digest()
	d2, _ := second.Digest()
	if d1 != d2 {
		t.Fatalf("two builds: got digests %s and %s, want one", d1, d2)
	}
	if pl != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("platform: got %s, want the build host's", pl)
	}
	im, err := first.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index: got %d manifests, want 1", len(im.Manifests))
	}
	img, err := first.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for i, l := range layers {
		n, _ := l.Size()
		size += n
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		prev := ""
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			p := strings.TrimSuffix(h.Name, "/")
			if p <= prev {
				t.Errorf("layer %d: %s after %s, want sorted entries", i, p, prev)
			}
			if !h.ModTime.Equal(workspaceTime) {
				t.Errorf("layer %d: %s dated %s, want %s", i, p, h.ModTime, workspaceTime)
			}
			prev = p
		}
		rc.Close()
	}
	t.Logf("workspace image %s (%s): %d layers, %.1f MiB compressed", d1, pl, len(layers), float64(size)/(1<<20))

	u := New(t, Options{WorkspaceImage: true})
	if u.Workspace == nil || u.Workspace.Ref != WorkspaceRef || u.Workspace.Digest != d1 {
		t.Fatalf("Upstream.Workspace: got %+v, want %s at %s", u.Workspace, WorkspaceRef, d1)
	}
	if len(u.Images) != 2 {
		t.Errorf("Images: got %d, want the 2 random-layer images only", len(u.Images))
	}
	tag, err := name.NewTag(WorkspaceRef, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(tag, remote.WithTransport(u.Transport()))
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != d1 {
		t.Errorf("served %s: got %s, want %s", WorkspaceRef, desc.Digest, d1)
	}
	if New(t, Options{}).Workspace != nil {
		t.Error("Options{}: got a workspace image, want none")
	}
}

// TestWorkspaceImageRuns does what a user would: pulls the workspace image
// from the upstream with skopeo, trusting only the upstream's CA, and runs
// it with podman, offline: it is the test workspace (not the host), runs
// as coder, has the busybox tools a script uses, and its curl downloads
// over HTTPS with --cacert.
func TestWorkspaceImageRuns(t *testing.T) {
	testtier.Heavy(t, "runs a workspace image with podman")
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it runs the workspace image with rootful podman (tests here run as root)")
	}
	for _, tool := range []string{"skopeo", "podman"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (scripts/install-deps.sh installs it): %v", tool, err)
		}
	}
	u := New(t, Options{WorkspaceImage: true})
	pl := runtime.GOOS + "/" + runtime.GOARCH
	local := pullWorkspace(t, u)

	// Podman knows the image by the index's digest and the manifest's.
	out, err := command(t, "podman", "image", "inspect", "--format", "{{.Os}}/{{.Architecture}} {{.Size}} {{.Digest}} {{range .RepoDigests}}{{.}} {{end}}", local)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out)
	if len(f) < 3 {
		t.Fatalf("podman image inspect: got %q", out)
	}
	if f[0] != pl {
		t.Errorf("podman image inspect: platform %s, want %s", f[0], pl)
	}
	if want := u.Workspace.Digest.String(); f[2] != want {
		t.Errorf("podman image inspect: digest %s, want %s (the index the upstream serves)", f[2], want)
	}
	repo, _, _ := strings.Cut(local, ":")
	if want := repo + "@" + u.Workspace.Platforms[pl].String(); !slices.Contains(f[3:], want) {
		t.Errorf("podman image inspect: repo digests %v, want %s among them (the upstream's %s manifest)", f[3:], want, pl)
	}
	size, _ := strconv.ParseInt(f[1], 10, 64)
	t.Logf("%s in podman: %.1f MiB unpacked", local, float64(size)/(1<<20))

	hostCurlVersion, err := exec.Command(hostCurl, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	discovery := string(get(t, client(t, u), u.URL+"/.well-known/terraform.json"))
	const caInside = "/etc/upstream-ca.pem"
	runArgs := append([]string{"run", "--rm", "--network", "host", "--volume", u.CAFile + ":" + caInside + ":ro"}, ulimitFlags(t)...)
	runArgs = append(runArgs, local)
	tests := []struct {
		name     string
		args     []string
		want     string
		wantExit int
	}{
		{"os-release", []string{"cat", "/etc/os-release"}, WorkspaceOSRelease, 0},
		{"user", []string{"id"}, "uid=1000(coder) gid=1000(coder) groups=1000(coder)\n", 0},
		{"home", []string{"sh", "-c", `echo "$HOME $(pwd)"; ls -ld /tmp | cut -c1-10`}, "/home/coder /home/coder\ndrwxrwxrwt\n", 0},
		{"applets", []string{"sh", "-c", `for a in sh ls cat echo mkdir rm sleep env id mktemp chmod mv date seq kill hostname uname df head grep sed tr cut wc touch printf test [; do [ -x "/bin/$a" ] || echo "no /bin/$a"; done; [ -x /usr/bin/env ] || echo "no /usr/bin/env"`}, "", 0},
		{"script", []string{"sh", "-c", `d=$(mktemp -d) && seq 3 | tr '\n' ' ' > "$d/f" && chmod +x "$d/f" && mv "$d/f" "$d/g" && cat "$d/g" && rm -r "$d" && echo`}, "1 2 3 \n", 0},
		{"curl version", []string{"curl", "--version"}, string(hostCurlVersion), 0},
		{"curl https", []string{"curl", "-fsS", "--cacert", caInside, u.URL + "/.well-known/terraform.json"}, discovery, 0},
		// The image has no CA bundle: without --cacert curl trusts
		// nothing and gives up setting up TLS (77: "error setting
		// certificate file").
		{"curl untrusted", []string{"curl", "-fsS", u.URL + "/.well-known/terraform.json"}, "", 77},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := command(t, "podman", slices.Concat(runArgs, tt.args)...)
			exit := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				exit = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if exit != tt.wantExit {
				t.Fatalf("%s: got exit %d, want %d: %v", strings.Join(tt.args, " "), exit, tt.wantExit, err)
			}
			if got != tt.want {
				t.Errorf("%s: got\n%s\nwant\n%s", strings.Join(tt.args, " "), got, tt.want)
			}
		})
	}
}

// pullWorkspace copies the workspace image from the upstream into
// podman's storage under a name of this process's own, and removes it when
// the test ends.
func pullWorkspace(t *testing.T, u *Upstream) string {
	t.Helper()
	certs := t.TempDir()
	if err := os.WriteFile(filepath.Join(certs, "upstream-ca.crt"), u.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(u.URL, "https://")
	src := "docker://" + host + "/" + u.Workspace.Repository + ":" + u.Workspace.Tag
	local := fmt.Sprintf("localhost/upstreamtest/workspace:%d", os.Getpid())
	if _, err := command(t, "skopeo", "copy", "--quiet", "--src-cert-dir", certs, src, "containers-storage:"+local); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := command(t, "podman", "rmi", local); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})
	return local
}

// ulimitFlags keeps the container's nofile and nproc limits within this
// machine's hard limits: podman's defaults (1048576) exceed them, and runc
// then fails with "error setting rlimit type 7" (nofile) or "type 6"
// (nproc). Podman also lowers its own nproc limit to 32768 before it
// starts runc (podman 4.3, as strace shows), so nproc is at most that.
func ulimitFlags(t *testing.T) []string {
	t.Helper()
	var nofile, nproc unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &nproc); err != nil {
		t.Fatal(err)
	}
	np := min(nproc.Max, 32768)
	return []string{
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Max, nofile.Max),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", np, np),
	}
}

// command runs a program with a time limit and returns its standard
// output; an error carries its standard error.
func command(t *testing.T, prog string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
