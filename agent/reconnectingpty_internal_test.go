package agent

import (
	"bytes"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestRing: the ring keeps exactly the last ptyRingSize bytes, whatever
// the sizes of the writes.
func TestRing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []int
	}{
		{"Empty", nil},
		{"Small", []int{1, 10, 100}},
		{"ExactlyFull", []int{ptyRingSize}},
		{"OneWriteOverflows", []int{10, 3*ptyRingSize + 7}},
		{"ManyWritesOverflow", []int{4096, 4096, 40000, 30000, 60000, 1, 65535, 2, 20000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r ring
			var all []byte
			for i, n := range tc.writes {
				p := bytes.Repeat([]byte{byte('a' + i)}, n)
				p[0] = '<'
				r.write(p)
				all = append(all, p...)
				if len(r.buf) > 2*ptyRingSize {
					t.Fatalf("after write %d: got a buffer of %d bytes, want at most %d", i, len(r.buf), 2*ptyRingSize)
				}
			}
			want := all[max(0, len(all)-ptyRingSize):]
			if got := r.bytes(); !bytes.Equal(got, want) {
				t.Errorf("got %d bytes kept, want the last %d written", len(got), len(want))
			}
		})
	}
}

// TestPTYIdleExpiryOnClock: a web terminal session that no stream is
// attached to is killed exactly when ReconnectingPTYTimeout has passed on
// the agent's clock since the last stream left, not a millisecond before;
// a stream that attaches meanwhile cancels the expiry.
func TestPTYIdleExpiryOnClock(t *testing.T) {
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	idle := clock.Trap().AfterFunc("agent", "ptyIdle")
	defer idle.Close()
	const timeout = time.Minute
	client := codersdk.New(&url.URL{Scheme: "http", Host: "coderd.invalid"})
	client.SessionToken = fakeAgentToken
	a, err := New(Options{Client: client, Logger: discardLogger(), Clock: clock, ReconnectingPTYTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	a.manifest = codersdk.AgentManifest{Directory: t.TempDir()}
	t.Cleanup(a.ptys.closeAll)
	const id = "3f0c2a52-5d4e-4f6b-9b1a-7c2d8e9f0a1b"

	// attach opens a stream to the session; leave closes it and steps the
	// idle timer it arms, which must be the timeout.
	attach := func() (leave func()) {
		t.Helper()
		server, conn := net.Pipe()
		go func() { _, _ = io.Copy(io.Discard, conn) }()
		served, attached := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(served)
			a.ptys.serve(server, codersdk.RelayHeader{Kind: codersdk.RelayKindPTY, PTY: &codersdk.RelayPTY{Reconnect: id, Command: "sleep 600"}},
				func(err error) bool {
					if err != nil {
						t.Errorf("attach: %v", err)
					}
					close(attached)
					return err == nil
				}, discardLogger())
		}()
		select {
		case <-attached:
		case <-ctx.Done():
			t.Fatal("the stream was not answered")
		}
		return func() {
			t.Helper()
			_ = conn.Close()
			call := idle.MustWait(ctx)
			call.MustRelease(ctx)
			if call.Duration != timeout {
				t.Errorf("the idle timer runs %s, want %s", call.Duration, timeout)
			}
			<-served
		}
	}
	session := func() *ptySession {
		a.ptys.mu.Lock()
		defer a.ptys.mu.Unlock()
		return a.ptys.sessions[id]
	}
	alive := func(when string, s *ptySession) {
		t.Helper()
		if got := session(); got != s {
			t.Errorf("%s: the session is gone", when)
		}
		if err := s.proc.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("%s: its process is gone: %v", when, err)
		}
	}

	leave := attach()
	s := session()
	if s == nil {
		t.Fatal("no session after the stream was answered")
	}
	leave()
	clock.Advance(timeout - time.Millisecond).MustWait(ctx)
	alive("a millisecond before the timeout", s)
	// A stream attaches: the expiry is off.
	leave = attach()
	clock.Advance(time.Millisecond).MustWait(ctx)
	alive("with a stream attached at the timeout", s)
	if d, ok := clock.Peek(); ok {
		t.Errorf("an idle timer (due in %s) outlives the stream that attached", d)
	}

	// The stream leaves: the timeout runs again from now.
	leave()
	clock.Advance(timeout - time.Millisecond).MustWait(ctx)
	alive("a millisecond before the second timeout", s)
	clock.Advance(time.Millisecond).MustWait(ctx)
	if got := session(); got != nil {
		t.Error("the session outlived its idle timeout")
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		t.Fatal("the idle session's process did not end")
	}
}
