package builder

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"airgapcoder/bundle"
	"airgapcoder/internal/atomicfile"
	"airgapcoder/internal/buildinfo"
	"airgapcoder/internal/bytesize"
)

// Options configure Build.
type Options struct {
	// Config is the parsed bundle.yaml.
	Config *Config
	// OutputDir receives the bundle (or its parts). Default: the current
	// folder.
	OutputDir string
	// Key signs the manifest; nil writes an unsigned bundle.
	Key ed25519.PrivateKey
	// Split cuts the bundle into parts of this many bytes; 0 writes one file.
	Split int64
	// Against, when set, makes a delta bundle against that installed
	// release (an Inventory's manifest): see bundle.Delta.
	Against *bundle.Manifest
	// CacheDir is the download cache; empty means DefaultCacheDir.
	CacheDir string
	// Parallel bounds concurrent downloads; 0 means 4.
	Parallel int
	// BuildTime is recorded in the manifest and is every member's mtime;
	// zero means SOURCE_DATE_EPOCH from Environ, else now.
	BuildTime time.Time
	// Log receives progress: log lines, or one redrawn status line when TTY
	// is set. Nil discards.
	Log io.Writer
	// TTY draws progress on one status line (Log is a terminal).
	TTY bool
	// Environ is the environment read for HTTPS_PROXY, NO_PROXY,
	// SSL_CERT_FILE and SOURCE_DATE_EPOCH; nil means the process's.
	Environ []string

	// retryBase shortens retry delays in tests.
	retryBase time.Duration
	// releasesKey replaces HashiCorp's release signing key in tests.
	releasesKey string
}

// Result says what Build wrote.
type Result struct {
	// Path is the bundle file, or its part index (.part000) when split.
	Path string
	// Parts are the part files of a split bundle, in order; nil otherwise.
	Parts []string
	// SHA256 is the hex SHA-256 of the whole bundle (of the concatenated
	// parts when split).
	SHA256 string
	// Size is the bundle's size in bytes.
	Size int64
	// Manifest is the bundle's manifest.
	Manifest *bundle.Manifest
	// Delta is what a delta bundle (Options.Against) leaves to its base.
	Delta *bundle.Delta
	// Downloaded is how many bytes came over the network; CacheHits how
	// many downloads the cache saved.
	Downloaded int64
	CacheHits  int
}

// builder is one run of Build.
type builder struct {
	// certFiles are the certs: files, trusted beside the system roots.
	certFiles []string
	// gitCA writes, once per build, the CA file git clones trust with
	// (set by fetchModules).
	gitCA    func() (string, error)
	cfg      *Config
	opts     Options
	staging  string // the payload folder
	cache    *blobCache
	client   *http.Client
	sem      *semaphore.Weighted
	progress *buildProgress

	mu   sync.Mutex // guards comp and the fields below
	comp bundle.Components
	// providerMu serializes writes to the provider mirror tree.
	providerMu sync.Mutex
	// providers records every package stored: address → version →
	// "os/arch" platform → record.
	providers map[string]map[string]map[string]providerRecord
	// providerHashes is what the mirror holds: address → version →
	// platform → hashes, for lock files and template checks.
	providerHashes map[string]map[string]map[string][]string
	// imageDigests maps each bundled image's full name to the digests it
	// answers to (its top-level digest and its platform manifests).
	imageDigests map[string][]string
	// repos holds one authenticated client per image repository.
	repos map[string]*imageRepoOnce
	// stagedBlobs are the image layout's blob paths already written.
	stagedBlobs map[string]*sync.Once
	// compressedBlobs are payload paths of compressed image layers.
	compressedBlobs map[string]bool
	// layers are the image layers downloaded while the bundle is written
	// (layers.go): by later, under laterCtx, which its first error cancels.
	layers      []*laterLayer
	later       *errgroup.Group
	laterCtx    context.Context
	cancelLater context.CancelFunc
	hits        atomic.Int64
}

// Build fetches and verifies everything cfg lists and writes the bundle.
func Build(ctx context.Context, opts Options) (res *Result, err error) {
	if opts.Config == nil {
		return nil, fmt.Errorf("build bundle: no config")
	}
	if opts.OutputDir == "" {
		opts.OutputDir = "."
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	if opts.Environ == nil {
		opts.Environ = os.Environ()
	}
	if opts.BuildTime.IsZero() {
		if opts.BuildTime, err = bundle.DefaultBuildTime(opts.Environ); err != nil {
			return nil, err
		}
	}
	if opts.CacheDir == "" {
		if opts.CacheDir, err = DefaultCacheDir(); err != nil {
			return nil, err
		}
	}
	cache, err := openBlobCache(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	defer cache.Close()
	removeStaleStaging(cache)
	staging, err := os.MkdirTemp(filepath.Join(cache.dir, "partial"), "staging-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)

	cfg := opts.Config
	var certFiles []string
	for _, c := range cfg.Certs {
		certFiles = append(certFiles, c.Path)
	}
	client, err := newHTTPClient(clientOptions{certFiles: certFiles, registries: cfg.Registries, environ: opts.Environ, retryBase: opts.retryBase})
	if err != nil {
		return nil, fmt.Errorf("build bundle: %w", err)
	}
	b := &builder{
		certFiles:      certFiles,
		cfg:            cfg,
		opts:           opts,
		staging:        staging,
		cache:          cache,
		client:         client,
		sem:            semaphore.NewWeighted(int64(opts.Parallel)),
		progress:       newBuildProgress(opts.Log, opts.TTY),
		providerHashes: map[string]map[string]map[string][]string{},
		imageDigests:   map[string][]string{},
	}
	defer b.progress.close()
	ctx, b.cancelLater = context.WithCancel(ctx)
	b.later, b.laterCtx = errgroup.WithContext(ctx)
	defer func() {
		b.cancelLater()
		b.later.Wait() // no download outlives the build (or its cache lock)
	}()
	if err := b.fetchAll(ctx); err != nil {
		return nil, err
	}
	if err := b.stageTemplates(ctx); err != nil {
		return nil, err
	}
	b.sortComponents()

	m := &bundle.Manifest{
		Name:        cfg.Name,
		Release:     cfg.Release,
		BuildTime:   opts.BuildTime,
		ToolVersion: buildinfo.Version(),
		Components:  b.comp,
	}
	for _, p := range cfg.Platforms {
		m.Platforms = append(m.Platforms, slashPlatform(p))
	}
	b.progress.logf("writing the bundle")
	res, err = b.write(b.laterCtx, m)
	if err != nil {
		return nil, err
	}
	res.Downloaded = b.progress.bytes.Load()
	res.CacheHits = int(b.hits.Load())
	return res, nil
}

// fetchAll fetches every source but the templates, concurrently. The first
// failure cancels the rest.
func (b *builder) fetchAll(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return b.fetchCoder(ctx) })
	g.Go(func() error { return b.fetchTerraform(ctx) })
	g.Go(func() error { return b.fetchPostgres(ctx) })
	g.Go(func() error { return b.fetchProviders(ctx) })
	g.Go(func() error { return b.fetchImages(ctx) })
	g.Go(func() error { return b.fetchModules(ctx) })
	g.Go(func() error { return b.stageCerts(ctx) })
	return g.Wait()
}

// write packs the staging folder and the pending image layers with
// bundle.Write, under the context of the layers' downloads.
func (b *builder) write(ctx context.Context, m *bundle.Manifest) (*Result, error) {
	if err := os.MkdirAll(b.opts.OutputDir, 0o755); err != nil {
		return nil, fmt.Errorf("build bundle: %w", err)
	}
	res, err := bundle.Write(ctx, bundle.WriteOptions{
		PayloadDir: b.staging,
		OutputDir:  b.opts.OutputDir,
		Manifest:   *m,
		Key:        b.opts.Key,
		Split:      b.opts.Split,
		Compressed: b.isCompressed,
		Pending:    b.pendingLayers(),
		Progress:   b.progress.writing,
		Base:       b.opts.Against,
	})
	if err != nil {
		b.cancelLater()
	}
	// A failed download cancels ctx, and so the write: its error says why.
	if lerr := b.later.Wait(); lerr != nil && (err == nil || !errors.Is(lerr, context.Canceled)) {
		return nil, lerr
	}
	if err != nil {
		return nil, err
	}
	out := &Result{Path: res.Path, SHA256: res.SHA256, Size: res.Size, Manifest: &res.Manifest, Delta: res.Delta}
	for _, p := range res.Parts {
		out.Parts = append(out.Parts, filepath.Join(filepath.Dir(res.Path), p.Name))
	}
	return out, nil
}

// isCompressed says which payload files the builder knows to be
// compressed already: image layers of a compressed media type.
func (b *builder) isCompressed(path string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.compressedBlobs[path]
}

// removeStaleStaging removes staging folders of builds that did not finish;
// the cache lock says no other build runs.
func removeStaleStaging(c *blobCache) {
	entries, _ := os.ReadDir(filepath.Join(c.dir, "partial"))
	for _, e := range entries {
		if e.IsDir() && (strings.HasPrefix(e.Name(), "staging-") || strings.HasPrefix(e.Name(), "work-")) {
			os.RemoveAll(filepath.Join(c.dir, "partial", e.Name()))
		}
	}
}

// sortComponents puts the bill of materials in an order that does not
// depend on which download finished first.
func (b *builder) sortComponents() {
	c := &b.comp
	slices.SortFunc(c.Coder, func(x, y bundle.Binary) int { return strings.Compare(x.Platform, y.Platform) })
	if c.Terraform != nil {
		slices.SortFunc(c.Terraform.Binaries, func(x, y bundle.Binary) int { return strings.Compare(x.Platform, y.Platform) })
	}
	if c.Postgres != nil {
		slices.SortFunc(c.Postgres.Archives, func(x, y bundle.Binary) int { return strings.Compare(x.Platform, y.Platform) })
	}
	slices.SortFunc(c.Providers, func(x, y bundle.Provider) int {
		if n := strings.Compare(x.Source, y.Source); n != 0 {
			return n
		}
		return compareSemver(x.Version, y.Version)
	})
	// Images, templates and certs stay in file order.
}

// payloadPath returns the staging path of a payload path, creating its
// folder.
func (b *builder) payloadPath(rel string) (string, error) {
	if err := bundle.ValidPath(rel); err != nil {
		return "", err
	}
	p := filepath.Join(b.staging, filepath.FromSlash(rel))
	return p, os.MkdirAll(filepath.Dir(p), 0o755)
}

// stageFile copies src to the payload path rel with mode, returning the hex
// SHA-256 of what it copied.
func (b *builder) stageFile(src, rel string, mode fs.FileMode) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	return b.stageWrite(rel, mode, func(w io.Writer) error {
		if _, err := io.Copy(w, in); err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
		return nil
	})
}

// stageWrite creates the payload path rel with mode from what write
// writes to w (atomicfile.CreateNew: nothing is left there if write
// fails), returning the hex SHA-256 of it.
func (b *builder) stageWrite(rel string, mode fs.FileMode, write func(w io.Writer) error) (string, error) {
	dst, err := b.payloadPath(rel)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if err := atomicfile.CreateNew(dst, mode, func(w io.Writer) error { return write(io.MultiWriter(w, h)) }); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// stageBlob puts a cached blob at the payload path rel (mode 0644): a hard
// link when the cache is on the same file system, else a copy. A blob the
// cache held from an earlier build is hashed again first, so a damaged
// cache cannot slip into a bundle.
func (b *builder) stageBlob(blob cachedBlob, rel string) error {
	if err := verifyCached(blob); err != nil {
		return err
	}
	dst, err := b.payloadPath(rel)
	if err != nil {
		return err
	}
	if err := os.Link(blob.Path, dst); err == nil {
		return nil
	}
	_, err = b.stageFile(blob.Path, rel, 0o644)
	return err
}

// verifyCached hashes a blob the cache held from before again: the cache
// is not fsynced, so a crash may have torn a file, and a damaged one must
// not slip into a bundle. A damaged blob is removed.
func verifyCached(blob cachedBlob) error {
	if !blob.Hit || blob.Checked {
		return nil
	}
	got, _, err := fileDigest(blob.Path)
	if err != nil {
		return err
	}
	if got != blob.Digest {
		os.Remove(blob.Path)
		return fmt.Errorf("cache file %s is damaged (it has %s); it was removed, build again", blob.Path, got)
	}
	return nil
}

// fetchBlob is blobCache.fetch under the download semaphore, counting
// bytes and cache hits.
func (b *builder) fetchBlob(ctx context.Context, req fetchRequest) (cachedBlob, error) {
	if req.want != "" {
		if blob, ok := b.cache.stat(req.want); ok {
			if verifyCached(blob) == nil {
				b.hits.Add(1)
				blob.Checked = true
				return blob, nil
			}
			// Damaged (and now removed): fetch it again.
		}
	}
	if !req.slotHeld {
		if err := b.sem.Acquire(ctx, 1); err != nil {
			return cachedBlob{}, err
		}
		defer b.sem.Release(1)
	}
	req.progress = b.progress.addBytes
	blob, err := b.cache.fetch(ctx, req)
	if err == nil && blob.Hit {
		b.hits.Add(1)
	}
	return blob, err
}

// buildProgress reports what the build does: a line per step, or on a
// terminal one status line redrawn in place under them.
type buildProgress struct {
	w     io.Writer
	tty   bool
	start time.Time
	bytes atomic.Int64
	// written and toWrite follow bundle.Write (which reads every byte twice).
	written, toWrite atomic.Int64

	mu   sync.Mutex
	stop chan struct{}
	done chan struct{}
}

func newBuildProgress(w io.Writer, tty bool) *buildProgress {
	if w == nil {
		w = io.Discard
		tty = false
	}
	p := &buildProgress{w: w, tty: tty, start: time.Now()}
	if tty {
		p.stop, p.done = make(chan struct{}), make(chan struct{})
		go p.redraw()
	}
	return p
}

func (p *buildProgress) addBytes(n int64) { p.bytes.Add(n) }

// logf prints one line (above the status line on a terminal).
func (p *buildProgress) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s\n", line)
		p.drawLocked()
		return
	}
	fmt.Fprintf(p.w, "bundle: %s\n", line)
}

func (p *buildProgress) drawLocked() {
	elapsed := time.Since(p.start).Round(100 * time.Millisecond)
	downloaded := bytesize.Format(p.bytes.Load()) + " downloaded"
	if total := p.toWrite.Load(); total > 0 {
		// Image layers are still downloading while the bundle is written.
		fmt.Fprintf(p.w, "\r\x1b[Kwriting the bundle: %d%%, %s, %s", 100*p.written.Load()/total, downloaded, elapsed)
		return
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s, %s", downloaded, elapsed)
}

// writing is bundle.Write's progress callback.
func (p *buildProgress) writing(done, total int64) {
	p.written.Store(done)
	p.toWrite.Store(total)
}

func (p *buildProgress) redraw() {
	defer close(p.done)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			p.mu.Lock()
			fmt.Fprint(p.w, "\r\x1b[K")
			p.mu.Unlock()
			return
		case <-t.C:
			p.mu.Lock()
			p.drawLocked()
			p.mu.Unlock()
		}
	}
}

func (p *buildProgress) close() {
	if p.stop != nil {
		close(p.stop)
		<-p.done
		p.stop = nil
	}
}

// group runs functions concurrently; the first error cancels the others'
// context and is what Wait returns.
type group struct {
	g   *errgroup.Group
	ctx context.Context
}

func newGroup(ctx context.Context) *group {
	g, ctx := errgroup.WithContext(ctx)
	return &group{g: g, ctx: ctx}
}

func (g *group) Go(f func(ctx context.Context) error) { g.g.Go(func() error { return f(g.ctx) }) }

func (g *group) Wait() error { return g.g.Wait() }
