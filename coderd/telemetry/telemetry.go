// Package telemetry reports a small, anonymous usage snapshot of a coderd
// deployment to a telemetry endpoint that the operator configures.
//
// Nothing is sent unless telemetry is enabled: it is off by default
// (`--telemetry`, CODER_TELEMETRY_ENABLE), and when it is off the server does
// not construct a [Reporter] at all, so this package opens no connection.
//
// When enabled, a [Reporter] POSTs one JSON [Snapshot] to
// <telemetry-url>/snapshot right away and then once per interval. A snapshot
// holds exactly these fields and nothing else:
//
//	deployment_id  the deployment's random identifier
//	version        the coderd version
//	time           when the snapshot was taken
//	users          number of users
//	templates      number of templates
//	workspaces     number of workspaces
//	os, arch       the server's GOOS and GOARCH
//
// No names, e-mail addresses, template contents, IP addresses of users or
// workspaces, or other identifying data are collected. The receiving end of
// course sees the address the request comes from.
//
// The package never builds its own HTTP transport: every request goes
// through the *http.Client given in [Options], which carries the appliance's
// trust store and proxy settings.
package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime"
	"time"
)

// DefaultInterval is the time between two snapshots when
// [Options.Interval] is zero.
const DefaultInterval = 30 * time.Minute

const (
	// requestTimeout bounds one request, response included.
	requestTimeout = 10 * time.Second
	// maxResponseBody is how much of a response body is read (and discarded)
	// so that the connection can be reused.
	maxResponseBody = 64 << 10
)

// Snapshot is the body of one telemetry report. See the package comment for
// the meaning of each field.
type Snapshot struct {
	DeploymentID string    `json:"deployment_id"`
	Version      string    `json:"version"`
	Time         time.Time `json:"time"`
	Users        int64     `json:"users"`
	Templates    int64     `json:"templates"`
	Workspaces   int64     `json:"workspaces"`
	OS           string    `json:"os"`
	Arch         string    `json:"arch"`
}

// Options configures a [Reporter].
type Options struct {
	// URL is the base URL of the telemetry endpoint; snapshots are POSTed to
	// URL + "/snapshot". It must be an absolute http or https URL. Required.
	URL *url.URL
	// Client sends the requests. The server passes its single outbound
	// client; the Reporter never creates a transport of its own. Required.
	Client *http.Client
	// DeploymentID and Version are copied into every snapshot. Either may be
	// empty.
	DeploymentID, Version string
	// Interval is the time between two snapshots. Zero means
	// [DefaultInterval]; negative is an error.
	Interval time.Duration
	// Collect returns the usage counts (Users, Templates, Workspaces). The
	// Reporter fills in DeploymentID, Version, Time, OS and Arch itself and
	// overwrites whatever Collect put there. Required.
	Collect func(ctx context.Context) (Snapshot, error)
	// Logger receives send failures. Nil discards logs.
	Logger *slog.Logger
	// Now is the clock that stamps snapshots. Nil means time.Now.
	Now func() time.Time
}

// Reporter sends telemetry snapshots. Create it with [New]; its methods are
// safe for concurrent use.
type Reporter struct {
	endpoint *url.URL
	opts     Options
}

// New checks opts and returns a Reporter. It starts nothing and makes no
// request; call [Reporter.Run] for that.
func New(opts Options) (*Reporter, error) {
	if err := validateURL(opts.URL); err != nil {
		return nil, err
	}
	if opts.Client == nil {
		return nil, errors.New("telemetry: Client is required")
	}
	if opts.Collect == nil {
		return nil, errors.New("telemetry: Collect is required")
	}
	switch {
	case opts.Interval < 0:
		return nil, fmt.Errorf("telemetry: negative interval %s", opts.Interval)
	case opts.Interval == 0:
		opts.Interval = DefaultInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Reporter{
		endpoint: opts.URL.JoinPath("snapshot"),
		opts:     opts,
	}, nil
}

func validateURL(u *url.URL) error {
	if u == nil {
		return errors.New("telemetry: URL is required")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("telemetry: URL %q: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return fmt.Errorf("telemetry: URL %q: missing host", u.Redacted())
	}
	return nil
}

// Run sends one snapshot right away and then one every interval until ctx
// is cancelled. A failed send is logged and the next tick tries again. Run
// returns nil when ctx is cancelled.
func (r *Reporter) Run(ctx context.Context) error {
	ticker := time.NewTicker(r.opts.Interval)
	defer ticker.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := r.Report(ctx); err != nil && ctx.Err() == nil {
			r.opts.Logger.WarnContext(ctx, "send telemetry snapshot",
				slog.String("url", r.endpoint.Redacted()),
				slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Report collects and sends one snapshot. A response status outside 2xx is
// an error naming the status and the URL.
func (r *Reporter) Report(ctx context.Context) error {
	snap, err := r.opts.Collect(ctx)
	if err != nil {
		return fmt.Errorf("collect snapshot: %w", err)
	}
	snap.DeploymentID = r.opts.DeploymentID
	snap.Version = r.opts.Version
	snap.Time = r.opts.Now().UTC()
	snap.OS = runtime.GOOS
	snap.Arch = runtime.GOARCH

	body, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	target := r.endpoint.Redacted()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint.String(), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request for %s: %w", target, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if r.opts.Version != "" {
		req.Header.Set("User-Agent", "coder/"+r.opts.Version)
	}
	resp, err := r.opts.Client.Do(req)
	if err != nil {
		// The client's error already names the method and URL.
		return fmt.Errorf("post snapshot: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("post snapshot to %s: unexpected status %s", target, resp.Status)
	}
	return nil
}
