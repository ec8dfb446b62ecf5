package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd/telemetry"
	"airgapcoder/coderd/updatecheck"
)

// startUpdateCheck creates the outbound HTTP client (only when something
// is allowed to go out) and starts the update check when it is on.
func (st *startup) startUpdateCheck(ctx context.Context) error {
	cfg := st.s.cfg
	if cfg.Telemetry || cfg.UpdateCheck {
		st.outbound = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 30 * time.Second}
	}
	if !cfg.UpdateCheck {
		return nil
	}
	u, err := url.Parse(cfg.UpdateCheckURL)
	if err != nil {
		return fmt.Errorf("--update-check-url: %w", err)
	}
	checker, err := updatecheck.New(updatecheck.Options{URL: u, Client: st.outbound, CurrentVersion: cfg.Version, Logger: st.log.With("component", "updatecheck")})
	if err != nil {
		return err
	}
	st.checker = checker
	st.stop.Go(ctx, "update check", checker.Run)
	return nil
}

// startTelemetry starts the telemetry reporter when telemetry is on. The
// deployment id is kept in the database, so it survives restarts and is
// shared by replicas.
func (st *startup) startTelemetry(ctx context.Context) error {
	cfg := st.s.cfg
	if !cfg.Telemetry {
		return nil
	}
	deploymentID, err := st.db.DeploymentValue(ctx, "deployment_id", uuid.NewString())
	if err != nil {
		return fmt.Errorf("read deployment id: %w", err)
	}
	u, err := url.Parse(cfg.TelemetryURL)
	if err != nil {
		return fmt.Errorf("--telemetry-url: %w", err)
	}
	db := st.db
	rep, err := telemetry.New(telemetry.Options{
		URL: u, Client: st.outbound, DeploymentID: deploymentID, Version: cfg.Version, Logger: st.log.With("component", "telemetry"),
		Collect: func(ctx context.Context) (telemetry.Snapshot, error) {
			var snap telemetry.Snapshot
			var err error
			if snap.Users, err = db.CountUsers(ctx); err != nil {
				return snap, err
			}
			if snap.Templates, err = db.CountTemplates(ctx); err != nil {
				return snap, err
			}
			snap.Workspaces, err = db.CountWorkspaces(ctx)
			return snap, err
		},
	})
	if err != nil {
		return err
	}
	st.stop.Go(ctx, "telemetry", rep.Run)
	return nil
}
