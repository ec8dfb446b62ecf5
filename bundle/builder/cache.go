package builder

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"airgapcoder/internal/atomicfile"
)

// The build cache is content-addressed, so a second build downloads only
// what changed and an interrupted one resumes:
//
//	<dir>/blobs/sha256/<hex>           a verified download, named by its SHA-256
//	<dir>/blobs/sha256/<hex>.partial   a download of known digest in progress
//	<dir>/partial/<hex(kind, key)>     a download of unknown digest in progress
//	<dir>/index/<kind>/<hex(key)>      {"key", "digest", "size"}: what an
//	                                   immutable source (a release URL, a
//	                                   repacked installation) gave last time
//
// A blob appears under its name only after its hash was checked (written to
// *.partial, renamed after), so a name is a promise about the content. When
// the digest is known in advance (a provider zip listed in a signed
// SHA256SUMS, an image layer named in its manifest) the cache is consulted by
// digest and no request is made at all; otherwise by (kind, key) through the
// index. Partial downloads continue with an HTTP Range request where the
// server allows it. One build at a time may use a cache folder (a lock file
// says so).

// DefaultCacheDir returns the user's cache folder + /coder/bundle.
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the user cache folder: %w (set --cache-dir)", err)
	}
	return filepath.Join(dir, "coder", "bundle"), nil
}

// blobCache is the build's content-addressed store.
type blobCache struct {
	dir  string
	lock *os.File

	mu       sync.Mutex
	inflight map[string]*cacheFlight
}

type cacheFlight struct {
	done chan struct{}
	blob cachedBlob
	err  error
}

// cachedBlob is a file in the cache.
type cachedBlob struct {
	// Path is the file in the cache.
	Path string
	// Digest is "sha256:<hex>".
	Digest string
	// Size is its length in bytes.
	Size int64
	// Hit is true when no download was needed.
	Hit bool
	// Checked is true when the content was hashed in this build.
	Checked bool
	// Name is a file name the source gave the blob, kept in the index
	// (a repacked PostgreSQL archive's name); often empty.
	Name string
}

func openBlobCache(dir string) (*blobCache, error) {
	for _, d := range []string{filepath.Join(dir, "blobs", "sha256"), filepath.Join(dir, "partial"), filepath.Join(dir, "index")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("open cache: %w", err)
		}
	}
	lock, err := lockCacheDir(filepath.Join(dir, "lock"))
	if err != nil {
		return nil, fmt.Errorf("open cache %s: %w", dir, err)
	}
	return &blobCache{dir: dir, lock: lock, inflight: map[string]*cacheFlight{}}, nil
}

func (c *blobCache) Close() error {
	if c.lock == nil {
		return nil
	}
	err := c.lock.Close()
	c.lock = nil
	return err
}

// isSHA256Hex reports whether s is a sha256 in lower-case hex.
func isSHA256Hex(s string) bool { return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == "" }

func digestHex(digest string) (string, error) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || !isSHA256Hex(h) {
		return "", fmt.Errorf("%q is not a sha256 digest", digest)
	}
	return h, nil
}

func (c *blobCache) blobPath(digest string) (string, error) {
	h, err := digestHex(digest)
	if err != nil {
		return "", err
	}
	return filepath.Join(c.dir, "blobs", "sha256", h), nil
}

// stat returns the blob of digest when the cache holds it.
func (c *blobCache) stat(digest string) (cachedBlob, bool) {
	p, err := c.blobPath(digest)
	if err != nil {
		return cachedBlob{}, false
	}
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return cachedBlob{}, false
	}
	return cachedBlob{Path: p, Digest: digest, Size: st.Size(), Hit: true}, true
}

type indexEntry struct {
	Key    string `json:"key"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	Name   string `json:"name,omitempty"`
}

func (c *blobCache) indexPath(kind, key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(c.dir, "index", kind, hex.EncodeToString(sum[:]))
}

// lookup returns the blob that (kind, key) gave last time, if it is still
// in the cache.
func (c *blobCache) lookup(kind, key string) (cachedBlob, bool) {
	b, err := os.ReadFile(c.indexPath(kind, key))
	if err != nil {
		return cachedBlob{}, false
	}
	var e indexEntry
	if json.Unmarshal(b, &e) != nil || e.Key != key {
		return cachedBlob{}, false
	}
	blob, ok := c.stat(e.Digest)
	blob.Name = e.Name
	return blob, ok
}

// remember records that (kind, key) gave blob.
func (c *blobCache) remember(kind, key string, blob cachedBlob) error {
	p := c.indexPath(kind, key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(indexEntry{Key: key, Digest: blob.Digest, Size: blob.Size, Name: blob.Name})
	return atomicfile.Write(p, b, 0o644)
}

// opener starts reading a source at offset. It returns the offset it
// actually starts at: 0 when the source cannot resume.
type opener func(ctx context.Context, offset int64) (io.ReadCloser, int64, error)

// fetchRequest says what to fetch into the cache.
type fetchRequest struct {
	// want is the expected "sha256:<hex>"; empty when unknown.
	want string
	// slotHeld: the caller took a download slot for it (builder.fetchBlob).
	slotHeld bool
	// kind and key name the source in the index; empty key means: do not
	// consult or record the index.
	kind, key string
	// open reads the source.
	open opener
	// progress counts the bytes read; may be nil.
	progress func(n int64)
}

// DigestMismatchError says that a download is not what it should be.
type DigestMismatchError struct {
	// Got is the digest of what arrived, Want the one expected, both
	// "sha256:<hex>".
	Got, Want string
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("content has %s, want %s", e.Got, e.Want)
}

// fetch returns the blob a request names, from the cache when it holds it,
// else downloaded (resuming a partial download), verified and stored.
// Concurrent fetches of the same blob share one download.
func (c *blobCache) fetch(ctx context.Context, req fetchRequest) (cachedBlob, error) {
	if req.want != "" {
		if _, err := digestHex(req.want); err != nil {
			return cachedBlob{}, err
		}
		if b, ok := c.stat(req.want); ok {
			return b, nil
		}
	} else if req.key != "" {
		if b, ok := c.lookup(req.kind, req.key); ok {
			return b, nil
		}
	}
	flightKey := req.want
	if flightKey == "" {
		flightKey = req.kind + "\x00" + req.key
	}
	c.mu.Lock()
	if f, ok := c.inflight[flightKey]; ok && req.key+req.want != "" {
		c.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return cachedBlob{}, ctx.Err()
		}
		if f.err != nil {
			return cachedBlob{}, f.err
		}
		b := f.blob
		b.Hit = true
		return b, nil
	}
	f := &cacheFlight{done: make(chan struct{})}
	c.inflight[flightKey] = f
	c.mu.Unlock()

	f.blob, f.err = c.download(ctx, req)
	if f.err == nil && req.key != "" {
		f.err = c.remember(req.kind, req.key, f.blob)
	}
	close(f.done)
	c.mu.Lock()
	delete(c.inflight, flightKey)
	c.mu.Unlock()
	return f.blob, f.err
}

func (c *blobCache) partialPath(req fetchRequest) string {
	if req.want != "" {
		p, _ := c.blobPath(req.want)
		return p + ".partial"
	}
	sum := sha256.Sum256([]byte(req.kind + "\x00" + req.key))
	return filepath.Join(c.dir, "partial", hex.EncodeToString(sum[:]))
}

// download fetches into the partial file, resuming it, with up to
// maxAttempts reads; a resumed file whose digest comes out wrong is fetched
// again from the start once.
func (c *blobCache) download(ctx context.Context, req fetchRequest) (cachedBlob, error) {
	partial := c.partialPath(req)
	restarted := false
	var lastErr error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			if err := sleepCtx(ctx, 250*time.Millisecond<<(attempt-2)); err != nil {
				return cachedBlob{}, err
			}
		}
		blob, resumed, err := c.downloadOnce(ctx, req, partial)
		if err == nil {
			return blob, nil
		}
		lastErr = err
		var mismatch *DigestMismatchError
		switch {
		case ctx.Err() != nil:
			return cachedBlob{}, ctx.Err()
		case errors.As(err, &mismatch) && resumed && !restarted:
			restarted = true // the partial file was not what we thought
		case errors.As(err, &mismatch), errors.Is(err, errPermanent):
			return cachedBlob{}, err
		}
	}
	return cachedBlob{}, lastErr
}

// downloadBufSize is the size of the writes a download makes.
const downloadBufSize = 256 << 10

// errPermanent marks a failure that retrying does not cure (a 404).
var errPermanent = errors.New("permanent")

func (c *blobCache) downloadOnce(ctx context.Context, req fetchRequest, partial string) (blob cachedBlob, resumed bool, err error) {
	f, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return cachedBlob{}, false, err
	}
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	h := sha256.New()
	have, err := io.Copy(h, f)
	if err != nil {
		return cachedBlob{}, false, err
	}
	rc, start, err := req.open(ctx, have)
	if err != nil {
		return cachedBlob{}, false, err
	}
	defer rc.Close()
	if start != have {
		// The source starts over: so do we.
		if err := f.Truncate(0); err != nil {
			return cachedBlob{}, false, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return cachedBlob{}, false, err
		}
		h.Reset()
		have = 0
	}
	resumed = have > 0
	// A TLS body reads a record (16 KiB) at a time: gather them into
	// fewer, larger writes.
	bw := bufio.NewWriterSize(f, downloadBufSize)
	w := io.MultiWriter(bw, h)
	var src io.Reader = rc
	if req.progress != nil {
		src = &countingReader{r: rc, add: req.progress}
	}
	n, err := io.Copy(w, src)
	if ferr := bw.Flush(); err == nil {
		err = ferr // after a failed read, what arrived is kept to resume from
	}
	if err != nil {
		return cachedBlob{}, resumed, fmt.Errorf("download: %w", err)
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if req.want != "" && got != req.want {
		f.Close()
		f = nil
		os.Remove(partial)
		return cachedBlob{}, resumed, &DigestMismatchError{Got: got, Want: req.want}
	}
	// No fsync: a blob the cache gives back later is hashed again before
	// it is used (stageBlob, the provider check), so a blob a crash tore
	// is found and fetched again rather than trusted.
	if err := f.Close(); err != nil {
		f = nil
		return cachedBlob{}, resumed, err
	}
	f = nil
	final, err := c.blobPath(got)
	if err != nil {
		return cachedBlob{}, resumed, err
	}
	if err := os.Rename(partial, final); err != nil {
		return cachedBlob{}, resumed, err
	}
	return cachedBlob{Path: final, Digest: got, Size: have + n}, resumed, nil
}

// importFile moves the file at path (on the same file system as the cache,
// or copies it) into the cache under its digest.
func (c *blobCache) importFile(path string) (cachedBlob, error) {
	digest, size, err := fileDigest(path)
	if err != nil {
		return cachedBlob{}, err
	}
	final, _ := c.blobPath(digest)
	if b, ok := c.stat(digest); ok {
		os.Remove(path)
		return b, nil
	}
	if err := os.Rename(path, final); err != nil {
		if err := copyFileAtomic(path, final, 0o644); err != nil {
			return cachedBlob{}, err
		}
		os.Remove(path)
	}
	return cachedBlob{Path: final, Digest: digest, Size: size}, nil
}

// tempDir returns a fresh folder inside the cache (same file system as its
// blobs), for work whose result importFile takes in.
func (c *blobCache) tempDir() (string, error) {
	return os.MkdirTemp(filepath.Join(c.dir, "partial"), "work-")
}

type countingReader struct {
	r   io.Reader
	add func(int64)
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.add(int64(n))
	}
	return n, err
}

// httpOpener reads url with client, continuing at offset with a Range
// request when the server allows it.
func httpOpener(client *http.Client, url string) opener {
	var open opener
	open = func(ctx context.Context, offset int64) (io.ReadCloser, int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %w", errPermanent, err)
		}
		if offset > 0 {
			req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, 0, err
		}
		switch {
		case resp.StatusCode == http.StatusPartialContent && offset > 0 &&
			strings.HasPrefix(resp.Header.Get("Content-Range"), "bytes "+strconv.FormatInt(offset, 10)+"-"):
			return resp.Body, offset, nil
		case resp.StatusCode == http.StatusOK:
			return resp.Body, 0, nil
		case offset > 0 && resp.StatusCode >= 400 && resp.StatusCode < 500:
			// The server does not take our Range (or the partial file is
			// already whole): start over.
			resp.Body.Close()
			return open(ctx, 0)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		err = fmt.Errorf("GET %s: %s", redactURL(url), strings.TrimSpace(resp.Status+" "+strings.TrimSpace(string(body))))
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
			err = fmt.Errorf("%w: %w", errPermanent, err)
		}
		return nil, 0, err
	}
	return open
}

// redactURL drops a URL's query (which may carry a signed token) from
// messages.
func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}

func fileDigest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}

// copyFileAtomic copies src to dst through a temporary file.
func copyFileAtomic(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.WriteFunc(dst, perm, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}
