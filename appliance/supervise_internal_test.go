package appliance

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thejerf/suture/v4"

	"airgapcoder/certs"
	"airgapcoder/internal/testtier"
	"airgapcoder/internal/testwait"
	"airgapcoder/mirror"
)

// restarts records what a supervised component reported.
type restarts struct {
	mu     sync.Mutex
	counts []int
	causes []string
}

func (r *restarts) record(n int, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts = append(r.counts, n)
	r.causes = append(r.causes, cause.Error())
}

func (r *restarts) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.counts)
}

// fastPolicy makes a supervised component's waits short for a test.
func fastPolicy(s *supervised, maxRestarts int) *supervised {
	s.maxRestarts = maxRestarts
	s.backoff.InitialInterval, s.backoff.MaxInterval = 10*time.Millisecond, 50*time.Millisecond
	return s
}

// TestSupervisedGivesUp: a component that fails on every start is
// restarted with backoff, each restart reported, and after maxRestarts
// the tree ends with an error that names it and its last failure.
func TestSupervisedGivesUp(t *testing.T) {
	var served, restarted atomic.Int32
	heard := &restarts{}
	c := fastPolicy(newSupervised("widget",
		func(ctx context.Context) error { served.Add(1); return errors.New("widget exploded") },
		func(ctx context.Context) error {
			if restarted.Add(1) >= 2 {
				return errors.New("widget will not start")
			}
			return nil
		},
		slog.New(slog.DiscardHandler), heard.record), 3)
	tree := newSupervisionTree(slog.New(slog.DiscardHandler))
	tree.Add(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := tree.Serve(ctx)
	if ctx.Err() != nil {
		t.Fatal("the tree still runs 30 s after a component began failing on every start")
	}
	if err == nil || !errors.Is(err, suture.ErrTerminateSupervisorTree) {
		t.Fatalf("tree ended with %v, want the give-up", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "widget keeps failing: restarted 3 times") || !strings.Contains(msg, "widget will not start") {
		t.Errorf("the give-up says %q: want the component, its restarts and the last failure", msg)
	}
	if got := heard.counts; len(got) != 3 || got[0] != 1 || got[2] != 3 {
		t.Errorf("restarts reported: %v, want 1 2 3", got)
	}
	if heard.causes[0] != "widget exploded" {
		t.Errorf("the first restart's cause: %q", heard.causes[0])
	}
	if served.Load() != 2 || restarted.Load() != 3 {
		t.Errorf("served %d times and restarted %d: want 2 and 3 (the first restart worked, the others failed)", served.Load(), restarted.Load())
	}
}

// flakyServer answers pings until told to stop, like a crashed server,
// and answers again once restarted.
type flakyServer struct {
	down          atomic.Bool
	kills, starts atomic.Int32
}

func (f *flakyServer) Ping(context.Context) error {
	if f.down.Load() {
		return errors.New("connection refused")
	}
	return nil
}
func (f *flakyServer) Kill(context.Context) error { f.kills.Add(1); return nil }
func (f *flakyServer) Start(context.Context) error {
	f.starts.Add(1)
	f.down.Store(false)
	return nil
}

// TestSuperviseServerRestartsAfterDeadline: a server that stops answering
// is killed and started again once it has failed its probes for 5 s, not
// before; one that answers is left alone; and stopping the tree stops
// the supervision without a restart.
func TestSuperviseServerRestartsAfterDeadline(t *testing.T) {
	testtier.Heavy(t, "waits out a 5 s probe deadline in real time")
	f := &flakyServer{}
	heard := &restarts{}
	tree := newSupervisionTree(slog.New(slog.DiscardHandler))
	tree.Add(superviseServer("postgres", f, slog.New(slog.DiscardHandler), heard.record))
	ctx, cancel := context.WithCancel(context.Background())
	done := tree.ServeBackground(ctx)
	// Proves a negative: superviseServer probes on wall-clock tickers (it
	// takes no clock), so half its 5 s deadline must pass for real.
	time.Sleep(2500 * time.Millisecond)
	if f.kills.Load() != 0 {
		t.Fatal("a server that answers was restarted")
	}
	down := time.Now()
	f.down.Store(true)
	testwait.For(t, 15*time.Second, "a restart after it stopped answering", testwait.Bool(func() bool { return f.starts.Load() > 0 }))
	if took := time.Since(down); took < 5*time.Second {
		t.Errorf("restarted %s after it stopped answering: before the 5 s deadline", took)
	}
	if f.kills.Load() != 1 || heard.len() != 1 || !strings.Contains(heard.causes[0], "connection refused") {
		t.Errorf("kills %d, restarts reported %v %v: want one, caused by the failed probe", f.kills.Load(), heard.counts, heard.causes)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the tree did not stop")
	}
}

// TestMirrorServiceRestarts: a mirror whose socket fails is started again
// on the same address and serves again.
func TestMirrorServiceRestarts(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.EnsureServer(dir, []string{"localhost", "127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	cert, err := certs.LoadServerCertificate(dir)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := newMirrorService(mirror.ServerOptions{Dir: dir, Certificate: cert, Address: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	heard := &restarts{}
	tree := newSupervisionTree(slog.New(slog.DiscardHandler))
	tree.Add(newSupervised("mirror", ms.serve, ms.restart, slog.New(slog.DiscardHandler), heard.record))
	ctx, cancel := context.WithCancel(context.Background())
	done := tree.ServeBackground(ctx)
	defer func() {
		cancel()
		<-done
	}()
	<-ms.server().Ready()
	addr := ms.server().Addr().String()

	caPEM, err := os.ReadFile(filepath.Join(certs.CertsDir(dir), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	healthy := func() error {
		resp, err := client.Get("https://" + addr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	if err := healthy(); err != nil {
		t.Fatalf("before: %v", err)
	}
	ms.stopServing()
	testwait.For(t, 10*time.Second, "the mirror serving again at "+addr+" after its socket failed", func() (bool, string) {
		if heard.len() == 0 {
			return false, "no restart yet"
		}
		err := healthy()
		return err == nil, fmt.Sprint(err)
	})
	if got := ms.server().Addr().String(); got != addr {
		t.Errorf("restarted on %s, want %s", got, addr)
	}
}
