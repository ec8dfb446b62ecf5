// Package codersdk holds the HTTP API types of coderd and the Go client that
// the CLI, provisionerd and the agent use to talk to it.
//
// It holds types and the client only. It imports the standard library,
// github.com/coder/websocket (itself dependency-free, for the relay's
// WebSocket fallback) and airgapcoder/relayconn (the relay transport the
// client dials with, itself standard library only) and nothing else, so
// that every program that talks to coderd can link it without pulling in
// the server (gin, pgx). JSON field names follow Coder's API where Coder
// has the same thing, so that scripts written against Coder keep working.
package codersdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// SessionTokenHeader carries a session or API token on every request.
const SessionTokenHeader = "Coder-Session-Token"

// SessionTokenCookie is the cookie the dashboard uses for the same token.
const SessionTokenCookie = "coder_session_token"

// ProvisionerDaemonPSKHeader authenticates an external provisioner daemon by
// the deployment's pre-shared key.
const ProvisionerDaemonPSKHeader = "Coder-Provisioner-Daemon-PSK"

// Client talks to one coderd deployment.
type Client struct {
	// URL is the deployment's access URL.
	URL *url.URL
	// SessionToken, when set, is sent in the Coder-Session-Token header.
	SessionToken string
	// ProvisionerPSK, when set, is sent in the Coder-Provisioner-Daemon-PSK header.
	ProvisionerPSK string
	// HTTPClient is used for every request; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// New returns a client for the deployment at u.
func New(u *url.URL) *Client {
	return &Client{URL: u}
}

// WithURL returns a copy of c that sends its requests to u, with the same
// session token, PSK and HTTP client (so the same trust). The CLI reaches
// a workspace proxy this way, for relay connections only: a proxy serves
// the same connect endpoints as the primary, and no other API call.
func (c *Client) WithURL(u *url.URL) *Client {
	cp := *c
	cp.URL = u
	return &cp
}

func (c *Client) httpClient() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	return http.DefaultClient
}

// Request sends one request to path (relative to the deployment URL). A body
// that is an io.Reader is sent as is; anything else non-nil is sent as JSON.
// The caller closes the response body.
func (c *Client) Request(ctx context.Context, method, path string, body any, header ...func(*http.Request)) (*http.Response, error) {
	u, err := c.URL.Parse(path)
	if err != nil {
		return nil, fmt.Errorf("parse path %q: %w", path, err)
	}
	var r io.Reader
	contentType := ""
	switch b := body.(type) {
	case nil:
	case io.Reader:
		r = b
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("encode request body: %w", err)
		}
		r = bytes.NewReader(buf)
		contentType = "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.SessionToken != "" {
		req.Header.Set(SessionTokenHeader, c.SessionToken)
	}
	if c.ProvisionerPSK != "" {
		req.Header.Set(ProvisionerDaemonPSKHeader, c.ProvisionerPSK)
	}
	for _, h := range header {
		h(req)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	return resp, nil
}

// listPath is path with a list endpoint's query: the search query q and
// the page, limit and offset; each is left out when empty or zero.
func listPath(path, q string, limit, offset int) string {
	v := url.Values{}
	if q != "" {
		v.Set("q", q)
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if offset > 0 {
		v.Set("offset", strconv.Itoa(offset))
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// do sends a request, checks the status (200 OK when want is empty) and
// decodes a JSON answer into out (when out is non-nil).
func (c *Client) do(ctx context.Context, method, path string, body, out any, want ...int) error {
	return c.doWithHeader(ctx, method, path, body, out, nil, want...)
}

// doWithHeader is do with header, when not nil, applied to the request
// before it is sent.
func (c *Client) doWithHeader(ctx context.Context, method, path string, body, out any, header func(*http.Request), want ...int) error {
	var headers []func(*http.Request)
	if header != nil {
		headers = append(headers, header)
	}
	resp, err := c.Request(ctx, method, path, body, headers...)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if len(want) == 0 {
		want = []int{http.StatusOK}
	}
	ok := false
	for _, w := range want {
		ok = ok || resp.StatusCode == w
	}
	if !ok {
		return ReadBodyAsError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s response: %w", method, path, err)
	}
	return nil
}

// doJSON is do for a call that answers a JSON T: it returns the decoded
// answer with do's error.
func doJSON[T any](ctx context.Context, c *Client, method, path string, body any, want ...int) (T, error) {
	var out T
	err := c.do(ctx, method, path, body, &out, want...)
	return out, err
}

// Response is the error envelope of every failed API call.
type Response struct {
	Message     string            `json:"message"`
	Detail      string            `json:"detail,omitempty"`
	Validations []ValidationError `json:"validations,omitempty"`
}

// ValidationError names one bad field of a request.
type ValidationError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// Error is a failed API call as the client sees it.
type Error struct {
	Response
	StatusCode int
	Method     string
	URL        string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", e.Message)
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	for _, v := range e.Validations {
		fmt.Fprintf(&b, "; %s: %s", v.Field, v.Detail)
	}
	fmt.Fprintf(&b, " (%s %s: %d)", e.Method, e.URL, e.StatusCode)
	return b.String()
}

// ReadBodyAsError turns a failed response into an *Error.
func ReadBodyAsError(resp *http.Response) error {
	e := &Error{StatusCode: resp.StatusCode}
	if resp.Request != nil {
		e.Method = resp.Request.Method
		e.URL = resp.Request.URL.Redacted()
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(body, &e.Response); err != nil || e.Message == "" {
		e.Message = strings.TrimSpace(string(body))
		if e.Message == "" {
			e.Message = http.StatusText(resp.StatusCode)
		}
	}
	return e
}

// IsStatus reports whether err is an API error with the given status code.
func IsStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == status
}

// BuildInfo is what GET /api/v2/buildinfo answers.
type BuildInfo struct {
	Version     string `json:"version"`
	ExternalURL string `json:"external_url"`
	// Telemetry and UpdateCheck say whether the deployment sends anything out.
	Telemetry   bool `json:"telemetry"`
	UpdateCheck bool `json:"update_check"`
	// TemplatesImporting is true while the deployment is still importing
	// the templates it offers on first boot (the appliance's bundled
	// templates, pushed once the first user exists): a template that is
	// missing may appear shortly.
	TemplatesImporting bool `json:"templates_importing"`
}

// BuildInfo returns the deployment's version.
func (c *Client) BuildInfo(ctx context.Context) (BuildInfo, error) {
	return doJSON[BuildInfo](ctx, c, http.MethodGet, "/api/v2/buildinfo", nil)
}

func decodeJSON(resp *http.Response, out any) error {
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s response: %w", resp.Request.URL.Path, err)
	}
	return nil
}

// getBytes GETs path and returns the whole answer, which must be 200 OK:
// the calls that answer a file or a blob rather than JSON.
func (c *Client) getBytes(ctx context.Context, path string) ([]byte, error) {
	resp, err := c.Request(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, ReadBodyAsError(resp)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s response: %w", resp.Request.URL.Path, err)
	}
	return b, nil
}
