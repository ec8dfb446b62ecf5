package upstreamtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The workspace image is a Linux userland small enough to build at test
// time and real enough to run a workspace from, offline: the build host's
// static busybox (Debian's busybox-static) as /bin/busybox with a symlink
// per applet in /bin, and the host's /usr/bin/curl with every library ldd
// lists and the dynamic loader, at the paths ldd gives, so that
// `curl --cacert F https://…` works inside (an agent init script downloads
// the agent with it). Its /etc/os-release (WorkspaceOSRelease) tells it
// from the host; /etc/passwd and /etc/group hold root and coder
// (1000:1000, home /home/coder), and it runs as coder in /home/coder.
//
// It has one platform, the build host's, and two layers: busybox with the
// base files, then curl. Entries are sorted, owned by numeric ids and
// dated workspaceTime, and the layers are gzipped once in-process, so two
// builds on one machine give the same digest.

// WorkspaceRef is the reference the upstream serves the workspace image
// under when Options.WorkspaceImage is set (repository coder/workspace,
// tag 1, on any host a test maps to the upstream).
const WorkspaceRef = "images.test/coder/workspace:1"

// WorkspaceOSRelease is the workspace image's /etc/os-release.
const WorkspaceOSRelease = `PRETTY_NAME="Coder Test Workspace 1"
NAME="Coder Test Workspace"
VERSION_ID="1"
ID=coder-test
`

// workspaceTime dates every entry, layer and the config of the image.
var workspaceTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Host files the image is made of.
const (
	hostBusybox = "/bin/busybox"
	hostCurl    = "/usr/bin/curl"
)

// setupWorkspace builds the workspace image, pushes it with push under
// WorkspaceRef's repository and tag, and records it in u.Workspace.
func (u *Upstream) setupWorkspace(push remote.Option) error {
	idx, pl, err := workspaceIndex()
	if err != nil {
		return fmt.Errorf("workspace image: %w", err)
	}
	tag, err := name.NewTag(WorkspaceRef, name.StrictValidation)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(tag, idx, push); err != nil {
		return fmt.Errorf("push %s: %w", WorkspaceRef, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	u.Workspace = &Image{
		Ref:        WorkspaceRef,
		Repository: tag.RepositoryStr(),
		Tag:        tag.TagStr(),
		Digest:     d,
		Index:      idx,
		Platforms:  map[string]v1.Hash{pl: im.Manifests[0].Digest},
	}
	return nil
}

// workspaceIndex builds the workspace image as an OCI index of one
// manifest, for the build host's platform pl ("linux/amd64").
func workspaceIndex() (idx v1.ImageIndex, pl string, err error) {
	if runtime.GOOS != "linux" {
		return nil, "", fmt.Errorf("build on linux, not %s", runtime.GOOS)
	}
	base, err := baseTree()
	if err != nil {
		return nil, "", err
	}
	curl, err := curlTree()
	if err != nil {
		return nil, "", err
	}
	img := mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1)
	for _, l := range []struct {
		t  tree
		by string
	}{
		{base, "upstreamtest: busybox (" + hostBusybox + "), /etc/os-release, /etc/passwd, /etc/group, /home/coder, /tmp"},
		{curl, "upstreamtest: " + hostCurl + " and the libraries ldd lists"},
	} {
		layer, err := l.t.layer()
		if err != nil {
			return nil, "", err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: v1.Time{Time: workspaceTime}, CreatedBy: l.by},
		})
		if err != nil {
			return nil, "", err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, "", err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = runtime.GOOS, runtime.GOARCH
	cf.Created = v1.Time{Time: workspaceTime}
	cf.Config = v1.Config{
		Cmd:        []string{"/bin/sh"},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		User:       "coder",
		WorkingDir: "/home/coder",
		Labels:     map[string]string{"org.opencontainers.image.title": "Coder Test Workspace 1"},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, "", err
	}
	idx = mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{
		Add:        img,
		Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}},
	})
	return idx, runtime.GOOS + "/" + runtime.GOARCH, nil
}

// baseTree is the first layer: busybox, its applets, the files that make
// a user, and the folders a workspace writes to.
func baseTree() (tree, error) {
	t := tree{}
	bin, mode, err := readHost(hostBusybox)
	if err != nil {
		return nil, fmt.Errorf("%w (Debian package busybox-static)", err)
	}
	if err := checkStatic(hostBusybox); err != nil {
		return nil, err
	}
	t.file("bin/busybox", mode, bin)
	out, err := exec.Command(hostBusybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", hostBusybox, err)
	}
	applets := strings.Fields(string(out))
	if !slices.Contains(applets, "sh") {
		return nil, fmt.Errorf("%s --list: no sh among %d applets", hostBusybox, len(applets))
	}
	for _, a := range applets {
		if a != "busybox" && !strings.Contains(a, "/") {
			t.symlink("bin/"+a, "/bin/busybox")
		}
	}
	t.symlink("usr/bin/env", "/bin/busybox") // for #!/usr/bin/env scripts
	t.file("etc/os-release", 0o644, []byte(WorkspaceOSRelease))
	t.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\ncoder:x:1000:1000:coder:/home/coder:/bin/sh\n"))
	t.file("etc/group", 0o644, []byte("root:x:0:\ncoder:x:1000:\n"))
	t.dir("root", 0o700, 0)
	t.dir("home/coder", 0o755, 1000)
	t.dir("tmp", 0o1777, 0)
	return t, nil
}

// curlTree is the second layer: curl, the loader and its libraries.
func curlTree() (tree, error) {
	t := tree{}
	out, err := exec.Command("ldd", hostCurl).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w (Debian package curl)", hostCurl, err)
	}
	libs, err := parseLdd(string(out))
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", hostCurl, err)
	}
	for _, p := range append([]string{hostCurl}, libs...) {
		data, mode, err := readHost(p)
		if err != nil {
			return nil, err
		}
		t.file(strings.TrimPrefix(p, "/"), mode, data)
	}
	return t, nil
}

// parseLdd returns the absolute paths in ldd's output, sorted: each
// "name => /path (address)" and the loader's "/path (address)". The vDSO
// has no file and is left out; a library ldd did not find is an error.
func parseLdd(out string) ([]string, error) {
	var paths []string
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if i := slices.Index(f, "=>"); i >= 0 {
			f = f[i+1:]
			if len(f) == 0 || f[0] == "not" {
				return nil, fmt.Errorf("library not found: %s", strings.TrimSpace(line))
			}
		}
		if strings.HasPrefix(f[0], "/") && !slices.Contains(paths, f[0]) {
			paths = append(paths, f[0])
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no library in %q", out)
	}
	slices.Sort(paths)
	return paths, nil
}

// readHost reads a host file through symbolic links, with its permission
// bits.
func readHost(p string) ([]byte, int64, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, 0, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, 0, err
	}
	return data, int64(fi.Mode().Perm()), nil
}

// checkStatic fails unless p is an ELF executable without an interpreter:
// the image has no libraries for it.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is linked dynamically, want the static busybox of busybox-static", p)
		}
	}
	return nil
}

// tree is one layer's entries by path, relative to the root, without
// leading or trailing slashes. Folders a path needs are added as root's,
// mode 0755, unless the tree has them already. Every entry is dated
// workspaceTime when written.
type tree map[string]treeEntry

type treeEntry struct {
	hdr  tar.Header
	data []byte
}

func (t tree) add(p string, hdr tar.Header, data []byte) {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if _, ok := t[d]; !ok {
			t[d] = treeEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}}
		}
	}
	t[p] = treeEntry{hdr: hdr, data: data}
}

func (t tree) dir(p string, mode int64, id int) {
	t.add(p, tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, Uid: id, Gid: id}, nil)
}

func (t tree) file(p string, mode int64, data []byte) {
	t.add(p, tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data))}, data)
}

func (t tree) symlink(p, target string) {
	t.add(p, tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: target, Mode: 0o777}, nil)
}

// layer writes the tree as a tar in path order (a folder before what it
// holds), gzips it and returns it as an OCI layer.
func (t tree) layer() (v1.Layer, error) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	tw := tar.NewWriter(zw)
	for _, p := range slices.Sorted(maps.Keys(t)) {
		e := t[p]
		e.hdr.ModTime = workspaceTime
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, fmt.Errorf("tar %s: %w", p, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	b := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
