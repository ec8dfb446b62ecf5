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
// The HTTP exchange and the loop are [periodic]'s: every request goes
// through the *http.Client given in [Options], which carries the appliance's
// trust store and proxy settings; the package never builds a transport.
package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime"
	"time"

	"airgapcoder/internal/periodic"
)

// DefaultInterval is the time between two snapshots when
// [Options.Interval] is zero.
const DefaultInterval = 30 * time.Minute

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
	client *periodic.Client
	opts   Options
}

// New checks opts and returns a Reporter. It starts nothing and makes no
// request; call [Reporter.Run] for that.
func New(opts Options) (*Reporter, error) {
	// The base URL is checked here so that an error quotes the URL the
	// operator configured, not the /snapshot endpoint made from it.
	if opts.URL == nil {
		return nil, errors.New("telemetry: URL is required")
	}
	if err := periodic.CheckURL(opts.URL); err != nil {
		return nil, fmt.Errorf("telemetry: URL %w", err)
	}
	if opts.Collect == nil {
		return nil, errors.New("telemetry: Collect is required")
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	popts := periodic.Options{
		URL:      opts.URL.JoinPath("snapshot"),
		Client:   opts.Client,
		Interval: opts.Interval,
		Action:   "send telemetry snapshot",
		Logger:   opts.Logger,
	}
	if opts.Version != "" {
		popts.UserAgent = "coder/" + opts.Version
	}
	client, err := periodic.New(popts)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	return &Reporter{client: client, opts: opts}, nil
}

// Run sends one snapshot right away and then one every interval until ctx
// is cancelled. A failed send is logged and the next tick tries again. Run
// returns nil when ctx is cancelled.
func (r *Reporter) Run(ctx context.Context) error {
	return r.client.Run(ctx, r.Report)
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
	if err := r.client.Do(ctx, http.MethodPost, body, nil); err != nil {
		return fmt.Errorf("send snapshot: %w", err)
	}
	return nil
}
