// Package periodic exchanges JSON with one operator-configured HTTP endpoint
// right away and then once per interval. It is the one engine behind coderd's
// telemetry (a POST of a snapshot) and update check (a GET of a release
// document): those packages decide what to send and what to make of the
// answer; this one owns the URL rules, the request, its timeout and size
// limit, the status check, and the loop.
//
// It sends nothing on its own. [New] makes no request and starts no
// goroutine; a request is made only inside [Client.Do], which [Client.Run]
// calls once per round. A feature that is off must simply not construct a
// [Client]: that is how coderd keeps an air-gapped deployment silent.
//
// It never builds its own HTTP transport: every request goes through the
// *http.Client given in [Options], which carries the appliance's trust store
// and proxy settings.
package periodic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// MaxResponseBody is the most of a response body that is read: a decoder
// sees the body cut at this size, and a body that is discarded is read up to
// it so that the connection can be reused.
const MaxResponseBody = 64 << 10

// requestTimeout bounds one exchange, response included.
const requestTimeout = 10 * time.Second

// Options configures a [Client].
type Options struct {
	// URL is where every request goes. It must be an absolute http or
	// https URL (see [CheckURL]). Required.
	URL *url.URL
	// Client sends the requests; the Client never creates a transport of
	// its own. Required.
	Client *http.Client
	// Interval is the time between two rounds of [Client.Run]. It must be
	// positive; callers substitute their own default for zero.
	Interval time.Duration
	// UserAgent is sent with every request. Empty leaves net/http's
	// default.
	UserAgent string
	// Action names one round in the warning [Client.Run] logs when a round
	// fails, for example "check for updates". Empty logs "periodic
	// request".
	Action string
	// Logger receives failed rounds. Nil discards them.
	Logger *slog.Logger
}

// Client talks to Options.URL. Create it with [New]; its methods are safe
// for concurrent use.
type Client struct {
	opts    Options
	timeout time.Duration // requestTimeout; shorter in tests
}

// New checks opts and returns a Client. It starts nothing and makes no
// request. Its errors name the option at fault and carry no package prefix:
// callers wrap them with their own ("telemetry: URL is required").
func New(opts Options) (*Client, error) {
	if opts.URL == nil {
		return nil, errors.New("URL is required")
	}
	if err := CheckURL(opts.URL); err != nil {
		return nil, fmt.Errorf("URL %w", err)
	}
	if opts.Client == nil {
		return nil, errors.New("Client is required")
	}
	switch {
	case opts.Interval < 0:
		return nil, fmt.Errorf("negative interval %s", opts.Interval)
	case opts.Interval == 0:
		return nil, errors.New("Interval is required")
	}
	if opts.Action == "" {
		opts.Action = "periodic request"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{opts: opts, timeout: requestTimeout}, nil
}

// CheckURL reports an error unless u is an absolute http or https URL. The
// error starts with the quoted, redacted URL, so that callers can say which
// URL it is about: fmt.Errorf("release url %w", err).
func CheckURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return fmt.Errorf("%q: missing host", u.Redacted())
	}
	return nil
}

// Run calls round right away and then once every interval until ctx is
// cancelled. A round that fails is logged as a warning (Options.Action, with
// the URL and the error) and the next tick tries again. Run returns nil when
// ctx is cancelled, without calling round if it already is.
func (c *Client) Run(ctx context.Context, round func(ctx context.Context) error) error {
	ticker := time.NewTicker(c.opts.Interval)
	defer ticker.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := round(ctx); err != nil && ctx.Err() == nil {
			c.opts.Logger.WarnContext(ctx, c.opts.Action,
				slog.String("url", c.opts.URL.Redacted()),
				slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Do makes one request to the URL and gives it 10 seconds, response
// included. A non-nil body is sent as application/json. For a 2xx answer the
// response body, cut at [MaxResponseBody] bytes, goes to decode, and the
// request asks for application/json; a nil decode discards the body.
//
// A status outside 2xx is an error naming the method, the URL and the
// status; an error from decode is wrapped with the URL. An error from the
// http.Client is returned as it is: it already names the method and URL.
func (c *Client) Do(ctx context.Context, method string, body []byte, decode func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	target := c.opts.URL.Redacted()
	var reqBody io.Reader
	if body != nil {
		reqBody = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.opts.URL.String(), reqBody)
	if err != nil {
		return fmt.Errorf("build request for %s: %w", target, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if decode != nil {
		req.Header.Set("Accept", "application/json")
	}
	if c.opts.UserAgent != "" {
		req.Header.Set("User-Agent", c.opts.UserAgent)
	}
	resp, err := c.opts.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	limited := io.LimitReader(resp.Body, MaxResponseBody)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, limited)
		return fmt.Errorf("%s %s: unexpected status %s", method, target, resp.Status)
	}
	if decode == nil {
		_, _ = io.Copy(io.Discard, limited)
		return nil
	}
	if err := decode(limited); err != nil {
		return fmt.Errorf("decode response from %s: %w", target, err)
	}
	return nil
}
