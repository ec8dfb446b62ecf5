package bundle

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"airgapcoder/internal/atomicfile"
)

// ErrNotEmpty is returned by Extract when the target folder exists and is
// not empty.
var ErrNotEmpty = errors.New("bundle: the target folder is not empty")

// Extract verifies a bundle while unpacking it and returns its manifest.
//
// The payload is written into a staging folder beside dir
// (".<dir>.unverified-*" in dir's parent), every file created exclusively,
// with the manifest's mode and fsynced. Only when every check Verify makes has
// passed is the staging folder renamed to dir, in one step. On any failure
// the staging folder is removed and dir is left as it was: absent, or empty.
// dir may exist if it is an empty folder; a non-empty dir is ErrNotEmpty.
//
// pub checks the signature; with pub set, allowUnsigned also accepts an
// unsigned bundle. With pub nil, allowUnsigned must be set (no signature is
// checked, only hashes).
func Extract(ctx context.Context, path, dir string, pub ed25519.PublicKey, allowUnsigned bool) (Manifest, error) {
	return ExtractWith(ctx, path, dir, ExtractOptions{PublicKey: pub, AllowUnsigned: allowUnsigned})
}

// ExtractOptions configure ExtractWith.
type ExtractOptions struct {
	// PublicKey and AllowUnsigned are Extract's pub and allowUnsigned.
	PublicKey     ed25519.PublicKey
	AllowUnsigned bool
	// BaseDir is the unpacked base release a delta bundle takes its
	// omitted files from (its name and content are the caller's to check
	// first: see Delta.Base). A delta bundle without it is an error.
	BaseDir string
	// Finish, when set, is called with the staging folder and the
	// verified manifest once every check has passed, before the folder is
	// renamed to dir: what it writes there arrives in dir in the same step
	// as the payload, so that nothing sees dir without it.
	Finish func(staging string, m Manifest) error
}

// ExtractWith is Extract, for a full or a delta bundle: a delta's omitted
// files are copied from o.BaseDir into the staging folder, each checked
// against the manifest, before the folder is renamed into place.
func ExtractWith(ctx context.Context, path, dir string, o ExtractOptions) (Manifest, error) {
	pub, allowUnsigned := o.PublicKey, o.AllowUnsigned
	if pub == nil && !allowUnsigned {
		return Manifest{}, errors.New("bundle: extract: a public key is required (or allow unsigned bundles explicitly)")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Manifest{}, fmt.Errorf("bundle: extract: %w", err)
	}
	if err := checkEmptyDir(dir); err != nil {
		return Manifest{}, err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return Manifest{}, fmt.Errorf("bundle: extract: %w", err)
	}
	staging, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".unverified-")
	if err != nil {
		return Manifest{}, fmt.Errorf("bundle: extract: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(staging)
		}
	}()

	u := &unpacker{root: staging, dirs: map[string]bool{staging: true}, buf: make([]byte, copyBufSize)}
	m, info, err := walk(ctx, path, walkOptions{pub: pub, allowUnsigned: allowUnsigned, visit: u.file})
	if err != nil {
		return Manifest{}, err
	}
	if d := info.Delta; d != nil {
		if o.BaseDir == "" {
			return Manifest{}, fmt.Errorf("bundle: extract: %s is a delta bundle against %s %s: it needs that release, installed (coder appliance install or upgrade on the appliance that has it)",
				filepath.Base(path), d.Base.Name, d.Base.Release)
		}
		if err := u.copyFromBase(&m, d, o.BaseDir); err != nil {
			return Manifest{}, err
		}
	}
	if o.Finish != nil {
		if err := o.Finish(staging, m); err != nil {
			return Manifest{}, fmt.Errorf("bundle: extract: %w", err)
		}
	}
	if err := u.syncDirs(); err != nil {
		return Manifest{}, fmt.Errorf("bundle: extract: %w", err)
	}
	if err := os.Chmod(staging, 0o755); err != nil {
		return Manifest{}, fmt.Errorf("bundle: extract: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Manifest{}, err
	}
	// rename(2) replaces an empty folder and fails on a non-empty one, so a
	// folder filled since the check above is not clobbered.
	if err := os.Rename(staging, dir); err != nil {
		return Manifest{}, fmt.Errorf("bundle: extract: move the verified files into %s: %w", dir, err)
	}
	done = true
	if err := atomicfile.SyncDir(parent); err != nil {
		return Manifest{}, fmt.Errorf("bundle: extract: %w", err)
	}
	return m, nil
}

func checkEmptyDir(dir string) error {
	st, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bundle: extract: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("bundle: extract: %s exists and is not a folder", dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("bundle: extract: %w", err)
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); err != io.EOF {
		if err != nil {
			return fmt.Errorf("bundle: extract: %w", err)
		}
		return fmt.Errorf("%w: %s", ErrNotEmpty, dir)
	}
	return nil
}

// unpacker writes payload files under root.
type unpacker struct {
	root string
	dirs map[string]bool
	buf  []byte
}

func (u *unpacker) file(f File, r io.Reader) error {
	// f.Path passed ValidPath: relative, clean, no "..", so it stays in root;
	// and root holds only folders and regular files this unpacker made.
	dst := filepath.Join(u.root, filepath.FromSlash(f.Path))
	if err := u.mkdirs(filepath.Dir(dst)); err != nil {
		return err
	}
	return atomicfile.CreateNew(dst, os.FileMode(f.Mode), func(w io.Writer) error {
		// A plain Writer, so the copy uses buf rather than os.File's fallback.
		_, err := io.CopyBuffer(struct{ io.Writer }{w}, r, u.buf)
		return err
	})
}

func (u *unpacker) mkdirs(dir string) error {
	if u.dirs[dir] {
		return nil
	}
	if err := u.mkdirs(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	u.dirs[dir] = true
	return nil
}

// syncDirs makes every created folder's entries durable, deepest first.
func (u *unpacker) syncDirs() error {
	dirs := make([]string, 0, len(u.dirs))
	for d := range u.dirs {
		dirs = append(dirs, d)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if err := atomicfile.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}
