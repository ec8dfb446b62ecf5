package mirror

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"airgapcoder/internal/bodydeadline"
)

// URL paths of the mirror's two services.
const (
	ProvidersPath = "/terraform/providers/"
	RegistryPath  = "/v2/"
)

// DefaultAddress is where `coder mirror serve` listens unless told
// otherwise: loopback, so that exposing the mirror is a decision.
const DefaultAddress = "127.0.0.1:8443"

// Folders of an installed bundle that the mirror serves.
const (
	ProvidersDir = "providers"
	ImagesDir    = "images"
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Dir is the bundle folder: the provider tree at Dir/providers and the
	// OCI layout at Dir/images. Required.
	Dir string
	// Certificate is the serving certificate (chain and key). Required:
	// the caller loads it (an appliance's, with certs.LoadServerCertificate).
	Certificate tls.Certificate
	// ProvidersDir, ImagesDir and ModulesDir override where the provider
	// tree, the OCI layout and the module packages are read from (an
	// installed appliance keeps them in its current release); empty means
	// Dir/providers, Dir/images and Dir/modules.
	ProvidersDir, ImagesDir, ModulesDir string
	// Address is the TCP address to listen on; empty means DefaultAddress.
	// Ignored when Listener is set.
	Address string
	// Listener, when set, is used instead of listening on Address; Run
	// closes it.
	Listener net.Listener
	// Logger receives errors and warnings; nil discards them.
	Logger *slog.Logger
	// ShutdownTimeout bounds how long in-flight downloads may take to finish
	// when Run's context is cancelled; zero means 30 s.
	ShutdownTimeout time.Duration
	// BodyReadTimeout is how long a request that has a body may take to
	// send it (package bodydeadline); zero means bodydeadline.Default, a
	// negative value sets no deadline.
	BodyReadTimeout time.Duration
}

// Server serves the provider network mirror at ProvidersPath, the module
// registry at ModulesPath and the read-only OCI registry at RegistryPath
// over HTTPS, plus GET /healthz.
type Server struct {
	opts     ServerOptions
	log      *slog.Logger
	handler  http.Handler
	registry *Registry
	cert     tls.Certificate

	ready chan struct{}
	mu    sync.Mutex
	addr  net.Addr
}

// NewServer reads the image layout (see NewRegistry). It neither listens
// nor starts goroutines: Run does.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("mirror: server: no folder given")
	}
	if len(opts.Certificate.Certificate) == 0 || opts.Certificate.PrivateKey == nil {
		return nil, errors.New("mirror: server: no serving certificate given")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.ProvidersDir == "" {
		opts.ProvidersDir = filepath.Join(opts.Dir, ProvidersDir)
	}
	if opts.ImagesDir == "" {
		opts.ImagesDir = filepath.Join(opts.Dir, ImagesDir)
	}
	if opts.ModulesDir == "" {
		opts.ModulesDir = filepath.Join(opts.Dir, ModulesDir)
	}
	reg, err := NewRegistry(opts.ImagesDir, log)
	if err != nil {
		return nil, err
	}
	modules, err := ModuleHandler(opts.ModulesDir)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(ProvidersPath, http.StripPrefix(ProvidersPath[:len(ProvidersPath)-1], ProviderHandler(opts.ProvidersDir)))
	mux.Handle(ModulesPath, http.StripPrefix(ModulesPath[:len(ModulesPath)-1], modules))
	mux.Handle("/v2/", reg)
	mux.Handle("/v2", reg)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("OK"))
	})
	if opts.BodyReadTimeout == 0 {
		// The mirror reads no body (writes are refused), but net/http
		// reads up to 256 KiB of an unread one before it answers.
		opts.BodyReadTimeout = bodydeadline.Default
	}
	handler := bodydeadline.Wrap(opts.BodyReadTimeout, logRequests(log, mux))
	return &Server{opts: opts, log: log, handler: handler, registry: reg, cert: opts.Certificate, ready: make(chan struct{})}, nil
}

// logRequests logs every request at debug level (coder mirror serve -v):
// method, path, status, bytes and duration.
func logRequests(log *slog.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !log.Enabled(r.Context(), slog.LevelDebug) {
			h.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		log.Debug("request", "method", r.Method, "path", r.URL.Path, "range", r.Header.Get("Range"),
			"status", sw.status, "bytes", sw.bytes, "duration", time.Since(start), "remote", r.RemoteAddr)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Handler returns the server's HTTP handler (without TLS), for tests and for
// mounting in another server.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry returns the registry the server serves.
func (s *Server) Registry() *Registry { return s.registry }

// Ready is closed once Run listens; Addr is valid from then on.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr returns the address Run listens on, nil before Ready.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// TLSConfig returns the server side TLS configuration: the serving
// certificate, TLS 1.2 or later.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{s.cert}, MinVersion: tls.VersionTLS12}
}

// Run listens and serves HTTPS until ctx is cancelled, then shuts down
// gracefully (in-flight downloads get ShutdownTimeout) and returns nil.
func (s *Server) Run(ctx context.Context) error {
	ln := s.opts.Listener
	if ln == nil {
		addr := s.opts.Address
		if addr == "" {
			addr = DefaultAddress
		}
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("mirror: listen: %w", err)
		}
	}
	srv := &http.Server{
		Handler:           s.handler,
		TLSConfig:         s.TLSConfig(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: large layers on slow links take as long as
		// they take. Requests have no body worth reading (writes are
		// refused); a body's deadline is BodyReadTimeout.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	// HTTP/1.1 only: Go's HTTP/2 server sends layers in 16 KiB frames
	// and pulls over it ran at less than half the speed (see
	// docs/mirror-and-certs.md); registry clients open a connection per
	// concurrent blob anyway.
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	close(s.ready)

	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("mirror: serve: %w", err)
	case <-ctx.Done():
	}
	timeout := s.opts.ShutdownTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-errc
	return nil
}
