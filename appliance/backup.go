package appliance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"airgapcoder/bundle"
	"airgapcoder/coderd"
	"airgapcoder/codersdk"
	"airgapcoder/postgres"

	"airgapcoder/internal/atomicfile"
)

// newPostgres is the bundled PostgreSQL of release rel.
func newPostgres(l Layout, cfg Config, m bundle.Manifest, rel string, log *slog.Logger) (*postgres.Server, error) {
	if m.Components.Postgres == nil {
		return nil, errors.New("this bundle carries no PostgreSQL and postgres-url is not set")
	}
	pg, err := postgres.New(postgres.Options{
		DataDir:     l.Postgres(),
		RuntimeDir:  filepath.Join(l.Run(), "postgres"),
		CacheDir:    filepath.Join(rel, bundle.DirPostgres),
		BinariesDir: filepath.Join(l.Cache(), "postgres"),
		Version:     m.Components.Postgres.Version,
		RunAsUser:   cfg.ServiceUser,
		Logger:      log.With("component", "postgres"),
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return pg, nil
}

// postgresInfo is where a running appliance says how to reach its database
// (0600: it holds the password), so backup can use it while it runs.
func (l Layout) postgresInfo() string { return filepath.Join(l.Run(), "postgres.json") }

type pgInfo struct {
	URL    string `json:"url"`
	BinDir string `json:"bin_dir"`
}

func writePostgresInfo(l Layout, pg *postgres.Server) error {
	b, _ := json.Marshal(pgInfo{URL: pg.URL(), BinDir: pg.BinDir()})
	return atomicfile.Write(l.postgresInfo(), b, 0o600)
}

// withDatabase runs fn against the appliance's database: the running one
// when the appliance is up, else the bundled server started for the call.
func withDatabase(ctx context.Context, dir string, log *slog.Logger, needStopped bool, fn func(info pgInfo) error) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	l := Layout{Dir: dir}
	cfg, err := LoadConfig(dir, nil)
	if err != nil {
		return err
	}
	if cfg.PostgresURL != "" {
		return errors.New("this appliance uses an external database (postgres-url): back it up with that server's tools")
	}
	if cfg.IsProxy() {
		return fmt.Errorf("%s is a workspace proxy (role: proxy): it has no database; run this on the primary (%s)", dir, cfg.PrimaryAccessURL)
	}
	release, err := l.CurrentRelease()
	if err != nil || release == "" {
		return fmt.Errorf("nothing is installed in %s", dir)
	}
	if b, err := os.ReadFile(l.postgresInfo()); err == nil {
		if needStopped {
			return errors.New("the appliance is running: stop it before restoring")
		}
		var info pgInfo
		if err := json.Unmarshal(b, &info); err == nil {
			if err := fn(info); err == nil {
				return nil
			} else if !errors.Is(err, errUnreachable) {
				return err
			}
			// A stale file from a crash: start the database below.
		}
	}
	m, err := readManifest(l.Release(release))
	if err != nil {
		return err
	}
	pg, err := newPostgres(l, cfg, m, l.Release(release), log)
	if err != nil {
		return err
	}
	if err := pg.Start(ctx); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = pg.Stop(stopCtx)
	}()
	return fn(pgInfo{URL: pg.URL(), BinDir: pg.BinDir()})
}

var errUnreachable = errors.New("database unreachable")

func pgTool(ctx context.Context, info pgInfo, tool string, args ...string) error {
	bin := filepath.Join(info.BinDir, "bin", tool)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("this bundle's PostgreSQL has no %s (looked for %s)", tool, bin)
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if strings.Contains(msg, "Connection refused") || strings.Contains(msg, "could not connect") {
			return fmt.Errorf("%w: %s", errUnreachable, msg)
		}
		return fmt.Errorf("%s: %v: %s", tool, err, msg)
	}
	return nil
}

// Backup dumps the appliance's database with the bundle's own pg_dump
// (custom format) to file, written atomically.
func Backup(ctx context.Context, dir, file string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tmp := file + ".partial"
	err := withDatabase(ctx, dir, log, false, func(info pgInfo) error {
		return pgTool(ctx, info, "pg_dump", "--format=custom", "--file="+tmp, "--dbname="+info.URL)
	})
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("backup: %w", err)
	}
	return os.Rename(tmp, file)
}

// Restore replaces the appliance's database with a backup, using the
// bundle's own pg_restore. The appliance must be stopped.
func Restore(ctx context.Context, dir, file string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	l := Layout{Dir: dir}
	if abs, err := filepath.Abs(dir); err == nil {
		l.Dir = abs
	}
	op := newOperation(codersdk.AuditActionRestore, "").set("backup_file", file)
	ran := false
	err := withDatabase(ctx, dir, log, true, func(info pgInfo) error {
		ran = true
		// The audit log outlives the restore: the backup's copy of it is
		// older, and the next start copies back what it lacks. coderd,
		// which owns the table, reads it.
		n, err := coderd.ExportAuditLog(ctx, info.URL, l.AuditJournal())
		if err != nil {
			return err
		}
		op.set("audit_records_kept", strconv.Itoa(n))
		return pgTool(ctx, info, "pg_restore", "--clean", "--if-exists", "--no-owner", "--single-transaction", "--dbname="+info.URL, file)
	})
	if ran {
		if current, cerr := l.CurrentRelease(); cerr == nil {
			op.release = current
		}
		op.record(l, log, "restore of the database from "+filepath.Base(file), err)
	}
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}
