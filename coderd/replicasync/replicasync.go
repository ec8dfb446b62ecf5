// Package replicasync keeps track of the coderd replicas that serve one
// deployment from one PostgreSQL database. It registers this replica in the
// replicas table (id, hostname, relay address, version), refreshes its
// heartbeat, keeps the list of live replicas current (at every heartbeat,
// and at once when another replica announces that it joined or left on
// ChannelReplicas), logs replicas joining and leaving, and removes this
// replica's row on a clean shutdown. A replica whose heartbeat stops drops
// out of the list after MaxAge; the others delete its row after an hour.
//
// Mixed versions never serve at once: New refuses to start a replica while
// replicas of another version are alive (waiting first for rows of replicas
// that just died to age out), and a live replica that sees another version
// join logs an error.
//
// replicasync only says who is alive. It must not carry traffic between
// replicas or decide where agents are: the relay does that with what this
// package lists.
package replicasync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/quartz"
	"github.com/google/uuid"

	"airgapcoder/coderd/database"
	"airgapcoder/internal/clockwait"
)

// DefaultInterval is how often a replica refreshes its heartbeat.
const DefaultInterval = 3 * time.Second

// DefaultMaxAge is MaxAge with DefaultInterval.
const DefaultMaxAge = 3 * DefaultInterval

// forgetAfter is how long the rows of dead replicas stay (for operators
// who look at the table after an incident) before a live replica deletes
// them.
const forgetAfter = time.Hour

// Options describe this replica.
type Options struct {
	// Hostname names the host in listings (default os.Hostname by the
	// caller; required).
	Hostname string
	// RelayAddress is where other replicas reach this one (required).
	RelayAddress string
	// Version is this replica's build version (required).
	Version string
	// Interval is the heartbeat period (default DefaultInterval). A
	// replica silent for three intervals counts as gone.
	Interval time.Duration
	// Logger receives joins, leaves and version conflicts (nil discards).
	Logger *slog.Logger
	// Clock times the heartbeat (a ticker tagged "replicasync",
	// "heartbeat") and New's wait for replicas of another version (a
	// timer tagged "replicasync", "versionWait", polled until MaxAge plus
	// an interval has passed on it): pass coderd's (coderd.Options.Clock).
	// Nil means the real clock. The heartbeats' times, and so the age
	// that decides who is alive, are on the database's clock.
	Clock quartz.Clock
}

// Manager is this replica's registration. Create it with New, run its
// heartbeat with Run.
type Manager struct {
	db       *database.DB
	pubsub   *database.Pubsub
	log      *slog.Logger
	clock    quartz.Clock
	interval time.Duration

	mu   sync.Mutex
	self database.Replica
	live map[string]database.Replica
}

// New registers this replica and returns its Manager. It fails when
// replicas of another version serve the deployment: it waits up to MaxAge
// for their heartbeats to stop (a replica killed just before an upgrade),
// then returns an error that names them.
func New(ctx context.Context, db *database.DB, ps *database.Pubsub, opts Options) (*Manager, error) {
	if opts.Hostname == "" || opts.RelayAddress == "" || opts.Version == "" {
		return nil, errors.New("replicasync: Hostname, RelayAddress and Version are required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	clock := opts.Clock
	if clock == nil {
		clock = quartz.NewReal()
	}
	m := &Manager{db: db, pubsub: ps, log: log, clock: clock, interval: opts.Interval, live: map[string]database.Replica{}}
	if err := m.waitForOneVersion(ctx, opts.Version); err != nil {
		return nil, err
	}
	self, err := db.UpsertReplica(ctx, database.Replica{
		ID: uuid.NewString(), Hostname: opts.Hostname, RelayAddress: opts.RelayAddress, Version: opts.Version,
	})
	if err != nil {
		return nil, fmt.Errorf("register replica: %w", err)
	}
	m.self = self
	if err := db.Notify(ctx, database.ChannelReplicas, self.ID); err != nil {
		return nil, fmt.Errorf("announce replica: %w", err)
	}
	if err := m.refresh(ctx); err != nil {
		return nil, err
	}
	log.Info("replica registered", "id", self.ID, "hostname", self.Hostname, "relay_address", self.RelayAddress,
		"version", self.Version, "replicas", m.describe())
	return m, nil
}

// MaxAge is how old a replica's last heartbeat may be for it to count as
// alive: three heartbeat intervals.
func (m *Manager) MaxAge() time.Duration { return 3 * m.interval }

// waitForOneVersion returns once no live replica runs another version than
// version, or an error naming them once they outlived MaxAge of waiting.
// The wait is on m.clock; the rows it waits for age on the database's.
func (m *Manager) waitForOneVersion(ctx context.Context, version string) error {
	deadline := m.clock.Now().Add(m.MaxAge() + m.interval)
	for {
		all, err := m.db.LiveReplicas(ctx, m.MaxAge())
		if err != nil {
			return fmt.Errorf("list replicas: %w", err)
		}
		var other []string
		for _, r := range all {
			if r.Version != version {
				other = append(other, fmt.Sprintf("%s on %s (version %s)", r.RelayAddress, r.Hostname, r.Version))
			}
		}
		if len(other) == 0 {
			return nil
		}
		if m.clock.Now().After(deadline) {
			return fmt.Errorf("replicas of another version serve this deployment: %s; this replica is version %s: "+
				"stop or upgrade them first (mixed versions must not serve at once)", strings.Join(other, ", "), version)
		}
		m.log.Warn("waiting for replicas of another version to stop", "replicas", other, "version", version)
		if !clockwait.Sleep(ctx, m.clock, m.interval, nil, "replicasync", "versionWait") {
			return ctx.Err()
		}
	}
}

// Run refreshes the heartbeat every interval and the list of live
// replicas on every announcement, until ctx ends; then it deletes this
// replica's row and announces that it left. It returns nil.
func (m *Manager) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	cancel := m.pubsub.Subscribe(database.ChannelReplicas, func(string) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	defer cancel()
	tick := m.clock.NewTicker(m.interval, "replicasync", "heartbeat")
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := m.leave(); err != nil {
				m.log.Warn("leave the deployment: the others drop this replica after its heartbeat ages out", "err", err, "max_age", m.MaxAge())
			}
			return nil
		case <-tick.C:
			m.heartbeat(ctx)
		case <-wake:
		}
		if err := m.refresh(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("list replicas", "err", err)
		}
	}
}

// heartbeat refreshes this replica's row (recreating it should another
// replica have deleted it after a long pause) and forgets long-dead ones.
//
// Shutting down does not cancel a heartbeat in flight: a cancelled query
// may still commit on the server after pgx has given up on it, and so
// after leave's delete, bringing this replica's row back to life for
// MaxAge (an upgrade started right after it would see it). The write gets
// MaxAge of its own instead: a heartbeat later than that is stale anyway.
func (m *Manager) heartbeat(ctx context.Context) {
	m.mu.Lock()
	self := m.self
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.MaxAge())
	defer cancel()
	updated, err := m.db.UpsertReplica(ctx, self)
	if err != nil {
		m.log.Warn("replica heartbeat", "err", err)
		return
	}
	m.mu.Lock()
	m.self = updated
	m.mu.Unlock()
	if n, err := m.db.DeleteReplicasOlderThan(ctx, forgetAfter); err == nil && n > 0 {
		m.log.Info("forgot dead replicas", "count", n, "silent_for_more_than", forgetAfter)
	}
}

// refresh reads the live replicas and logs who joined, who left and any
// replica of another version.
func (m *Manager) refresh(ctx context.Context) error {
	all, err := m.db.LiveReplicas(ctx, m.MaxAge())
	if err != nil {
		return fmt.Errorf("list replicas: %w", err)
	}
	live := make(map[string]database.Replica, len(all))
	for _, r := range all {
		live[r.ID] = r
	}
	m.mu.Lock()
	before, self := m.live, m.self
	m.live = live
	m.mu.Unlock()
	for id, r := range live {
		if _, ok := before[id]; !ok && id != self.ID {
			m.log.Info("replica joined", "id", r.ID, "hostname", r.Hostname, "relay_address", r.RelayAddress, "version", r.Version)
		}
		if r.Version != self.Version {
			m.log.Error("a replica of another version is serving this deployment: mixed versions must not serve at once",
				"id", r.ID, "hostname", r.Hostname, "its_version", r.Version, "version", self.Version)
		}
	}
	for id, r := range before {
		if _, ok := live[id]; !ok && id != self.ID {
			m.log.Info("replica left", "id", r.ID, "hostname", r.Hostname, "relay_address", r.RelayAddress)
		}
	}
	return nil
}

// leave deletes this replica's row and announces it, so the others drop it
// at once rather than after MaxAge.
func (m *Manager) leave() error {
	// A bound on the database's answer, on real time like the database.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id := m.Self().ID
	if err := m.db.DeleteReplica(ctx, id); err != nil {
		return fmt.Errorf("remove replica %s: %w", id, err)
	}
	if err := m.db.Notify(ctx, database.ChannelReplicas, id); err != nil {
		return fmt.Errorf("announce replica %s left: %w", id, err)
	}
	m.log.Info("replica left the deployment", "id", id)
	return nil
}

// Self is this replica's row as of its last heartbeat.
func (m *Manager) Self() database.Replica {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self
}

// All lists the live replicas, this one included, oldest first.
func (m *Manager) All() []database.Replica {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Collect(maps.Values(m.live))
	if _, ok := m.live[m.self.ID]; !ok {
		out = append(out, m.self)
	}
	slices.SortFunc(out, func(a, b database.Replica) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// describe is the live replicas in one log-friendly line.
func (m *Manager) describe() string {
	var parts []string
	for _, r := range m.All() {
		parts = append(parts, fmt.Sprintf("%s@%s(%s)", r.Hostname, r.RelayAddress, r.Version))
	}
	return strings.Join(parts, ", ")
}
