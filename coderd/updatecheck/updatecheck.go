// Package updatecheck asks a configured URL which coderd release is the
// latest and tells whether the running server is older.
//
// The check is off by default (`--update-check`, CODER_UPDATE_CHECK). When it
// is off the server does not construct a [Checker] at all, so this package
// opens no connection. When it is on, a [Checker] sends one GET to the
// configured URL at start and then once per interval, and remembers the
// last successful answer for the dashboard and the API.
//
// # Format
//
// The URL must answer with a 2xx status and a JSON object such as
//
//	{"version": "v2.15.0", "url": "https://mirror.example.internal/coder/v2.15.0/"}
//
// where
//
//	version  the latest release, "vMAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]"
//	         (the leading "v" is optional); required
//	url      where administrators can read about or fetch that release; an
//	         absolute http or https URL; optional
//
// Other fields are ignored and the body is read up to 64 KiB. Because it is
// one static file, an air-gapped site can serve it from its own mirror next
// to the bundles it imports.
//
// Versions are ordered by Semantic Versioning precedence (build metadata
// ignored), except that a development build ("v0.0.0-devel") is older than
// every other version.
//
// The HTTP exchange and the loop are [periodic]'s: every request goes
// through the *http.Client given in [Options], which carries the appliance's
// trust store and proxy settings; the package never builds a transport.
package updatecheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"airgapcoder/internal/periodic"
)

// DefaultInterval is the time between two checks when [Options.Interval] is
// zero.
const DefaultInterval = 24 * time.Hour

// Result is the outcome of one successful check.
type Result struct {
	// Checked is when the check was made.
	Checked time.Time `json:"checked"`
	// Current is the version of the running server.
	Current string `json:"current"`
	// Latest is the latest version as the URL reported it.
	Latest string `json:"version"`
	// URL is the release link the URL reported; it may be empty.
	URL string `json:"url"`
	// UpdateAvailable is true when Latest is newer than Current.
	UpdateAvailable bool `json:"update_available"`
}

// Options configures a [Checker].
type Options struct {
	// URL is where the latest-release document is fetched from (see the
	// package comment for the format). It must be an absolute http or https
	// URL. Required.
	URL *url.URL
	// Client sends the requests. The server passes its single outbound
	// client; the Checker never creates a transport of its own. Required.
	Client *http.Client
	// CurrentVersion is the running server's version, in the same format as
	// the document's version. Required.
	CurrentVersion string
	// Interval is the time between two checks. Zero means
	// [DefaultInterval]; negative is an error.
	Interval time.Duration
	// Logger receives check results and failures. Nil discards logs.
	Logger *slog.Logger
	// Now is the clock that stamps results. Nil means time.Now.
	Now func() time.Time
}

// Checker checks for updates. Create it with [New]; its methods are safe
// for concurrent use.
type Checker struct {
	client  *periodic.Client
	opts    Options
	current version

	mu     sync.Mutex
	latest Result
	ok     bool
}

// New checks opts and returns a Checker. It starts nothing and makes no
// request; call [Checker.Run] for that.
func New(opts Options) (*Checker, error) {
	current, err := parseVersion(opts.CurrentVersion)
	if err != nil {
		return nil, fmt.Errorf("updatecheck: current version: %w", err)
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	client, err := periodic.New(periodic.Options{
		URL:       opts.URL,
		Client:    opts.Client,
		Interval:  opts.Interval,
		UserAgent: "coder/" + opts.CurrentVersion,
		Action:    "check for updates",
		Logger:    opts.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("updatecheck: %w", err)
	}
	return &Checker{client: client, opts: opts, current: current}, nil
}

// Run checks right away and then once every interval until ctx is
// cancelled. A failed check is logged, keeps the previous result, and the
// next tick tries again. Run returns nil when ctx is cancelled.
func (c *Checker) Run(ctx context.Context) error {
	return c.client.Run(ctx, func(ctx context.Context) error {
		res, err := c.Check(ctx)
		switch {
		case err != nil:
			return err
		case res.UpdateAvailable:
			c.opts.Logger.InfoContext(ctx, "update available",
				slog.String("current", res.Current),
				slog.String("latest", res.Latest),
				slog.String("url", res.URL))
		default:
			c.opts.Logger.DebugContext(ctx, "up to date",
				slog.String("current", res.Current),
				slog.String("latest", res.Latest))
		}
		return nil
	})
}

// Check fetches the latest-release document once, compares it with the
// current version and, on success, remembers the result for
// [Checker.Latest]. A response status outside 2xx is an error naming the
// status and the URL.
func (c *Checker) Check(ctx context.Context) (Result, error) {
	var info releaseInfo
	if err := c.client.Do(ctx, http.MethodGet, nil, info.decode); err != nil {
		return Result{}, fmt.Errorf("check for updates: %w", err)
	}
	latest, err := parseVersion(info.Version)
	if err != nil {
		return Result{}, fmt.Errorf("check %s: %w", c.opts.URL.Redacted(), err)
	}
	if info.URL != "" {
		u, err := url.Parse(info.URL)
		if err != nil {
			return Result{}, fmt.Errorf("check %s: release url: %w", c.opts.URL.Redacted(), err)
		}
		if err := periodic.CheckURL(u); err != nil {
			return Result{}, fmt.Errorf("check %s: release url %w", c.opts.URL.Redacted(), err)
		}
	}
	res := Result{
		Checked:         c.opts.Now().UTC(),
		Current:         c.opts.CurrentVersion,
		Latest:          info.Version,
		URL:             info.URL,
		UpdateAvailable: compareVersions(latest, c.current) > 0,
	}
	c.mu.Lock()
	c.latest, c.ok = res, true
	c.mu.Unlock()
	return res, nil
}

// Latest returns the result of the last successful check, and false if no
// check has succeeded yet.
func (c *Checker) Latest() (Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest, c.ok
}

// releaseInfo is the document served at Options.URL.
type releaseInfo struct {
	Version string `json:"version"`
	URL     string `json:"url"`
}

// decode reads the document from r: exactly one JSON object with a version.
func (info *releaseInfo) decode(r io.Reader) error {
	dec := json.NewDecoder(r)
	if err := dec.Decode(info); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after JSON object")
	}
	if info.Version == "" {
		return errors.New(`missing "version"`)
	}
	return nil
}
