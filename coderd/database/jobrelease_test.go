package database_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
	"airgapcoder/internal/testport"
)

// A job acquired but never handed to its daemon (the database went away
// while coderd prepared it) goes back to the queue: pending, held by no
// one, announced to waiting daemons, and the next acquire gets it. A job
// the daemon does not hold, or that ended, is not released.
func TestReleaseJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := coderdtest.NewDatabase(t)
	db := coderdtest.OpenDatabase(t, url)
	posted := listen(t, url, database.ChannelJobPosted)
	org, user, file := uuid.NewString(), uuid.NewString(), uuid.NewString()
	seed(t, db.Pool(), ownerRows(org, user, file)...)
	tags := map[string]string{"scope": "organization"}
	d1, err := db.UpsertProvisionerDaemon(ctx, database.ProvisionerDaemon{OrganizationID: org, Name: "d1", Version: "v0", Tags: tags})
	must(t, "daemon d1", err)
	d2, err := db.UpsertProvisionerDaemon(ctx, database.ProvisionerDaemon{OrganizationID: org, Name: "d2", Version: "v0", Tags: tags})
	must(t, "daemon d2", err)
	job, err := db.InsertJob(ctx, database.InsertJobParams{OrganizationID: org, InitiatorID: user, Type: database.JobTypeTemplateVersionImport, Tags: tags, FileID: file})
	must(t, "insert job", err)
	<-posted

	acquired, err := db.AcquireJob(ctx, org, d1.ID, tags)
	if err != nil || acquired.ID != job.ID {
		t.Fatalf("acquire: got %s (%v), want %s", acquired.ID, err, job.ID)
	}
	if err := db.ReleaseJob(ctx, job.ID, d2.ID); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("release by a daemon that does not hold the job: got %v, want ErrNotFound", err)
	}
	must(t, "release", db.ReleaseJob(ctx, job.ID, d1.ID))
	if got := <-posted; got != job.ID {
		t.Errorf("announced %q after the release, want the job %s", got, job.ID)
	}
	j, err := db.JobByID(ctx, job.ID)
	must(t, "job", err)
	if j.Status() != database.JobPending || j.WorkerID != nil || j.StartedAt != nil {
		t.Fatalf("released job: status %s, worker %v, started %v; want pending, held by no one", j.Status(), j.WorkerID, j.StartedAt)
	}
	again, err := db.AcquireJob(ctx, org, d2.ID, tags)
	if err != nil || again.ID != job.ID {
		t.Fatalf("acquire after the release: got %s (%v), want %s", again.ID, err, job.ID)
	}
	_, err = db.FinishJob(ctx, job.ID, d2.ID, "", "")
	must(t, "finish", err)
	if err := db.ReleaseJob(ctx, job.ID, d2.ID); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("release of an ended job: got %v, want ErrNotFound", err)
	}
}

// Unavailable tells an outage (connection refused, the server crashed or
// restarting) from an error about the data.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	_, connectErr := pgx.Connect(context.Background(), "postgres://postgres@"+testport.Addr(t)+"/postgres?sslmode=disable&connect_timeout=5")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", connectErr, true},
		{"postmaster died, wrapped", fmt.Errorf("load workspace owner: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to unexpected postmaster exit"}), true},
		{"starting up", &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"not found", fmt.Errorf("load build: %w", database.ErrNotFound), false},
		{"no error", nil, false},
	} {
		if got := database.Unavailable(tc.err); got != tc.want {
			t.Errorf("%s (%v): Unavailable = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
