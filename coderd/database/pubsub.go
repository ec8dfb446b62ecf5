package database

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5"

	"airgapcoder/internal/clockwait"
)

// Pubsub delivers PostgreSQL notifications (LISTEN/NOTIFY) to subscribers in
// this process, so that any number of coderd replicas sharing one database
// wake each other up without polling. It holds one dedicated connection that
// listens on a fixed set of channels; subscribers filter by channel.
//
// When the connection drops and comes back, every subscriber is called with
// an empty payload: notifications may have been missed, so look again.
type Pubsub struct {
	url      string
	channels []string
	log      *slog.Logger
	clock    quartz.Clock

	mu     sync.Mutex
	subs   map[string]map[int]func(payload string)
	nextID int

	readyOnce sync.Once
	ready     chan struct{}
	listening atomic.Bool
}

// Channels are every notification channel coderd uses; a replica's
// Pubsub listens on all of them.
var Channels = []string{ChannelJobPosted, ChannelJobUpdated, ChannelReplicas, ChannelAgentConnection, ChannelAuthChanged, ChannelWorkspaceProxyDeleted}

// Notify sends payload on channel to every replica's subscribers (in the
// current transaction, if any: delivered when it commits).
func (db *DB) Notify(ctx context.Context, channel, payload string) error {
	_, err := db.q().Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
	return err
}

// NewPubsub returns a Pubsub for the given channels. Call Run to connect.
// clock times the backoff between reconnections (its timer is tagged
// "pubsub", "reconnect"); nil means the real clock.
func NewPubsub(url string, log *slog.Logger, clock quartz.Clock, channels ...string) *Pubsub {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Pubsub{url: url, channels: channels, log: log, clock: clock, subs: map[string]map[int]func(string){}, ready: make(chan struct{})}
}

// Ready is closed once the first connection listens.
func (p *Pubsub) Ready() <-chan struct{} { return p.ready }

// Listening reports whether notifications arrive now: false from the
// moment the connection drops until it listens again. A subscriber that
// relies on hearing of every change must not while this is false.
func (p *Pubsub) Listening() bool { return p.listening.Load() }

// Subscribe calls fn for every notification on channel until cancel is
// called. fn must not block.
func (p *Pubsub) Subscribe(channel string, fn func(payload string)) (cancel func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subs[channel] == nil {
		p.subs[channel] = map[int]func(string){}
	}
	id := p.nextID
	p.nextID++
	p.subs[channel][id] = fn
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.subs[channel], id)
	}
}

func (p *Pubsub) publishLocal(channel, payload string) {
	p.mu.Lock()
	fns := make([]func(string), 0, len(p.subs[channel]))
	for _, fn := range p.subs[channel] {
		fns = append(fns, fn)
	}
	p.mu.Unlock()
	for _, fn := range fns {
		fn(payload)
	}
}

// Run listens until ctx is done, reconnecting with backoff.
func (p *Pubsub) Run(ctx context.Context) error {
	// Doubling from 100ms to 5s, without jitter: one connection per replica.
	b := &backoff.ExponentialBackOff{InitialInterval: 100 * time.Millisecond, Multiplier: 2, MaxInterval: 5 * time.Second}
	b.Reset()
	for {
		err := p.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		in := b.NextBackOff()
		p.log.Warn("database notifications lost; reconnecting", "err", err, "in", in)
		if !clockwait.Sleep(ctx, p.clock, in, nil, "pubsub", "reconnect") {
			return nil
		}
	}
}

func (p *Pubsub) listen(ctx context.Context) error {
	cfg, err := listenerConfig(p.url)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range p.channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	p.listening.Store(true)
	defer p.listening.Store(false)
	p.readyOnce.Do(func() { close(p.ready) })
	// Tell everyone to look again: anything sent while we were away is lost.
	for _, ch := range p.channels {
		p.publishLocal(ch, "")
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		p.publishLocal(n.Channel, n.Payload)
	}
}

// listenerConfig is the configuration of the pubsub's own connection on
// url, the database URL the pool (Open) is made from: the pool's own
// parameters (pool_max_conns and the other pool_* ones pgxpool reads) are
// left out, which pgx would otherwise send PostgreSQL as run-time
// parameters, and PostgreSQL refuses those it does not know.
func listenerConfig(url string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	for k := range cfg.RuntimeParams {
		if strings.HasPrefix(k, "pool_") {
			delete(cfg.RuntimeParams, k)
		}
	}
	return cfg, nil
}
