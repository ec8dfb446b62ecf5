package builder

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpproxy"

	"airgapcoder/internal/buildinfo"
)

// The one HTTP client of a build. Every request bundle build makes (provider
// registries, HashiCorp releases, Maven, container registries) goes through
// it, so the same rules hold everywhere:
//
//   - proxies from HTTPS_PROXY, HTTP_PROXY and NO_PROXY, read when the
//     client is made;
//   - trust in the system roots, the file SSL_CERT_FILE names and the
//     certs: files of bundle.yaml; certificate checks are never skipped;
//   - registries: overrides, which send every request for a host to another
//     base URL (an Artifactory remote, a test server);
//   - retries with exponential backoff for GET and HEAD requests that fail
//     before a response or get 429, 500, 502, 503 or 504.

// clientOptions configure newHTTPClient.
type clientOptions struct {
	// certFiles are PEM files whose certificates are trusted beside the
	// system roots.
	certFiles []string
	// registries maps a host to the base URL that replaces https://<host>/.
	registries map[string]string
	// environ is the environment to read proxies and SSL_CERT_FILE from;
	// nil means the process's.
	environ []string
	// retryBase is the first retry's delay (default 250ms); tests shorten it.
	retryBase time.Duration
}

const maxAttempts = 4

func newHTTPClient(opts clientOptions) (*http.Client, error) {
	getenv := os.Getenv
	if opts.environ != nil {
		getenv = func(k string) string {
			for _, kv := range opts.environ {
				if v, ok := strings.CutPrefix(kv, k+"="); ok {
					return v
				}
			}
			return ""
		}
	}
	roots, err := trustPool(opts.certFiles, getenv("SSL_CERT_FILE"))
	if err != nil {
		return nil, err
	}
	proxy := (&httpproxy.Config{
		HTTPProxy:  firstEnv(getenv, "HTTP_PROXY", "http_proxy"),
		HTTPSProxy: firstEnv(getenv, "HTTPS_PROXY", "https_proxy"),
		NoProxy:    firstEnv(getenv, "NO_PROXY", "no_proxy"),
	}).ProxyFunc()
	base := &http.Transport{
		Proxy: func(r *http.Request) (*url.URL, error) { return proxy(r.URL) },
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		ExpectContinueTimeout: time.Second,
	}
	rt := http.RoundTripper(base)
	if len(opts.registries) > 0 {
		rt = &rewriteTransport{next: rt, bases: opts.registries}
	}
	retryBase := opts.retryBase
	if retryBase == 0 {
		retryBase = 250 * time.Millisecond
	}
	rt = &retryTransport{next: rt, base: retryBase}
	rt = &userAgentTransport{next: rt}
	return &http.Client{Transport: rt}, nil
}

func firstEnv(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// systemBundles are the distributions' CA bundles. Go reads SSL_CERT_FILE
// instead of them when it is set; the build wants both.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// trustPool returns the system roots plus the certificates in sslCertFile
// and certFiles. A file without a certificate is an error.
func trustPool(certFiles []string, sslCertFile string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if sslCertFile != "" {
		for _, f := range systemBundles {
			if b, err := os.ReadFile(f); err == nil {
				pool.AppendCertsFromPEM(b)
				break
			}
		}
		b, err := os.ReadFile(sslCertFile)
		if err != nil {
			return nil, fmt.Errorf("read SSL_CERT_FILE: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("SSL_CERT_FILE %s holds no PEM certificate", sslCertFile)
		}
	}
	for _, f := range certFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%s holds no PEM certificate", f)
		}
	}
	return pool, nil
}

type userAgentTransport struct{ next http.RoundTripper }

func (t *userAgentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("User-Agent") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("User-Agent", "coder-bundle/"+buildinfo.Version())
	}
	return t.next.RoundTrip(r)
}

// rewriteTransport sends requests for a host in bases to that base URL:
// https://registry.terraform.io/v1/providers/… with the base
// https://artifactory.corp/api/terraform/tf-remote/ becomes
// https://artifactory.corp/api/terraform/tf-remote/v1/providers/….
type rewriteTransport struct {
	next  http.RoundTripper
	bases map[string]string
}

// dockerHubAliases are the names Docker Hub is reached by; an override of
// any of them applies to all (go-containerregistry says index.docker.io for
// docker.io).
var dockerHubAliases = []string{"docker.io", "index.docker.io", "registry-1.docker.io"}

func (t *rewriteTransport) lookup(host string) (string, bool) {
	host = strings.ToLower(strings.TrimSuffix(host, ":443"))
	if b, ok := t.bases[host]; ok {
		return b, true
	}
	for _, alias := range dockerHubAliases {
		if host == alias {
			for _, other := range dockerHubAliases {
				if b, ok := t.bases[other]; ok {
					return b, true
				}
			}
		}
	}
	return "", false
}

func (t *rewriteTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base, ok := t.lookup(r.URL.Host)
	if !ok {
		return t.next.RoundTrip(r)
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	orig := r.URL
	r.URL = &url.URL{
		Scheme:   u.Scheme,
		Host:     u.Host,
		Path:     u.Path + strings.TrimPrefix(orig.Path, "/"),
		RawQuery: orig.RawQuery,
	}
	if orig.RawPath != "" {
		r.URL.RawPath = u.EscapedPath() + strings.TrimPrefix(orig.RawPath, "/")
	}
	r.Host = ""
	return t.next.RoundTrip(r)
}

// retryTransport retries idempotent requests without a body on network
// errors and on 429 and 5xx gateway answers.
type retryTransport struct {
	next http.RoundTripper
	base time.Duration
}

func retryable(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func (t *retryTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if (r.Method != http.MethodGet && r.Method != http.MethodHead) || (r.Body != nil && r.Body != http.NoBody) {
		return t.next.RoundTrip(r)
	}
	ctx := r.Context()
	for attempt := 1; ; attempt++ {
		resp, err := t.next.RoundTrip(r)
		if attempt == maxAttempts || ctx.Err() != nil {
			return resp, err
		}
		var wait time.Duration
		switch {
		case err != nil:
			var tlsErr *tls.CertificateVerificationError
			var uaErr x509.UnknownAuthorityError
			if errors.As(err, &tlsErr) || errors.As(err, &uaErr) {
				return resp, err // retrying does not make a certificate trusted
			}
		case retryable(resp.StatusCode):
			wait = retryAfter(resp.Header.Get("Retry-After"))
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		default:
			return resp, nil
		}
		if wait == 0 {
			backoff := t.base << (attempt - 1)
			wait = backoff/2 + rand.N(backoff/2+1)
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// retryAfter reads a Retry-After header in seconds, capped at 30 s.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, 30*time.Second)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// getSmall GETs url and returns its body, which must be 200 OK and at most
// limit bytes: metadata, never cached.
func (b *builder) getSmall(ctx context.Context, url string, limit int64) ([]byte, error) {
	resp, err := b.get(ctx, url, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", redactURL(url), resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", redactURL(url), err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("GET %s: answer larger than %d bytes", redactURL(url), limit)
	}
	return body, nil
}

// get sends GET url with the build's client (Accept: accept, when set)
// and fails on a status that is not 2xx. The caller closes the body.
func (b *builder) get(ctx context.Context, url, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", redactURL(url), resp.Status)
	}
	return resp, nil
}
