// Package testserver runs, for tests, the servers that
// scripts/install-deps.sh builds from their Go modules into a cache folder
// (Gitea, Ory Hydra): where a build is cached, starting one as a child
// process that the test's cleanup ends with everything it started, waiting
// until it answers, and calling its JSON API with a client that trusts only
// the test CA.
//
// It owns that plumbing only. What a server is configured with, which
// calls it answers and what a missing build tells the developer stay with
// the server's own package (testgitea, testidp). It is for tests only.
package testserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CacheDir returns the folder scripts/install-deps.sh builds name at
// version into: $XDG_CACHE_HOME/airgapcoder/NAME-VERSION ($HOME/.cache
// when XDG_CACHE_HOME is unset). It does not check that the build is there.
func CacheDir(name, version string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("testserver: find the cache folder: %w", err)
	}
	return filepath.Join(cache, "airgapcoder", name+"-"+version), nil
}

// Start starts cmd in a process group of its own and returns a channel
// closed when it has ended. t's cleanup kills the whole group (the server
// and whatever it started, such as Gitea's git processes) and waits for
// cmd. Start sets cmd.SysProcAttr; the rest of cmd (its environment,
// folder and output) is the caller's.
func Start(t testing.TB, cmd *exec.Cmd) (exited <-chan struct{}, err error) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(cmd.Args, " "), err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	return done, nil
}

// WaitReady calls ready every interval until it returns nil, ctx ends
// (the error then carries ready's last error) or exited is closed.
func WaitReady(ctx context.Context, exited <-chan struct{}, interval time.Duration, ready func() error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before it was ready (last: %v)", err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// BrowserClient returns a client that trusts only the CAs in pool, keeps
// cookies and follows redirects: a browser for tests that drive a server's
// pages from Go. Each call has its own transport: close its idle
// connections at the test's end (goleak counts their goroutines).
func BrowserClient(pool *x509.CertPool) *http.Client {
	jar, _ := cookiejar.New(nil) // cookiejar.New never fails with nil options
	return &http.Client{
		Jar:     jar,
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool},
			TLSHandshakeTimeout: 10 * time.Second,
		},
	}
}

// JSONAPI is a server's JSON API at one base URL.
type JSONAPI struct {
	// Client sends the requests; it must trust the server's CA.
	Client *http.Client
	// BaseURL is what a call's path is appended to, as is.
	BaseURL string
	// Header, when not nil, sets headers (credentials, typically) on every
	// request before the call's own edits.
	Header func(*http.Request)
}

// Call sends in (when not nil) as JSON to BaseURL+path, applies edits to
// the request, and decodes a 2xx answer into out (when not nil). Another
// status is an error holding the answer's text (its first MiB).
func (a JSONAPI) Call(ctx context.Context, method, path string, in, out any, edits ...func(*http.Request)) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.BaseURL+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if a.Header != nil {
		a.Header(req)
	}
	for _, edit := range edits {
		edit(req)
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// RandomBytes returns n bytes from crypto/rand, for secrets in a test
// server's configuration.
func RandomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return b
}

// RandomString returns n hex digits (n even) from crypto/rand.
func RandomString(n int) string { return hex.EncodeToString(RandomBytes(n / 2)) }

// Get sends a GET to url and returns nil when it answers 200: a readiness
// check for WaitReady.
func Get(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
