package controlplane

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"airgapcoder/coderd/database"
	"airgapcoder/postgres"
)

// startBuiltinPostgres starts the built-in PostgreSQL when no external
// URL is configured. Its data lives under ConfigDir/postgres.
func (st *startup) startBuiltinPostgres(ctx context.Context) error {
	cfg := st.s.cfg
	if cfg.PostgresURL != "" {
		st.dbURL = cfg.PostgresURL
		return nil
	}
	opts := cfg.BuiltinPostgres
	base := filepath.Join(cfg.ConfigDir, "postgres")
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(base, "data")
	}
	if opts.RuntimeDir == "" {
		opts.RuntimeDir = filepath.Join(base, "run")
	}
	if opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(cfg.CacheDir, "postgres")
	}
	if opts.BinariesDir == "" {
		opts.BinariesDir = filepath.Join(cfg.CacheDir, "postgres", "bin")
	}
	if opts.Logger == nil {
		opts.Logger = st.log.With("component", "postgres")
	}
	pg, err := postgres.New(opts)
	if err != nil {
		return err
	}
	st.log.Info("starting built-in postgres", "data", opts.DataDir)
	// Start stops what it started when it fails or ctx ends.
	if err := pg.Start(ctx); err != nil {
		return fmt.Errorf("data in %s: %w", opts.DataDir, err)
	}
	st.stop.Push("built-in postgres", func(ctx context.Context) error {
		// Its own deadline: the HTTP shutdown may have used up ctx's, and
		// Stop with an ended ctx kills PostgreSQL rather than stopping it.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := pg.Stop(stopCtx); err != nil {
			return err
		}
		st.log.Info("built-in postgres stopped")
		return nil
	})
	st.dbURL = pg.URL()
	return nil
}

func (st *startup) openDatabase(ctx context.Context) error {
	db, err := database.Open(ctx, st.dbURL)
	if err != nil {
		return err
	}
	st.stop.Push("database pool", func(context.Context) error {
		db.Close()
		return nil
	})
	st.db = db
	return nil
}

func (st *startup) migrate(ctx context.Context) error {
	return st.db.Migrate(ctx, st.log)
}

// startPubsub starts the LISTEN connection and waits until it listens, so
// that the first job posted wakes a waiting daemon.
func (st *startup) startPubsub(ctx context.Context) error {
	ps := database.NewPubsub(st.dbURL, st.log.With("component", "pubsub"), st.s.cfg.Clock, database.Channels...)
	st.stop.Go(ctx, "pubsub", ps.Run)
	st.pubsub = ps
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	select {
	case <-ps.Ready():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout.C:
		return errors.New("not listening after 30s")
	}
}
