package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"airgapcoder/agent"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testwait"
)

// ptyTerm is a web terminal client, as the dashboard's: it collects the
// binary output messages and sends ReconnectingPTYRequest text messages.
type ptyTerm struct {
	t      *testing.T
	ws     *websocket.Conn
	out    syncbuf.Buffer
	closed chan struct{}
	err    error // why reading ended; set before closed is closed
}

func dialPTY(t *testing.T, c *codersdk.Client, agentID string, opts codersdk.ReconnectingPTYOptions) *ptyTerm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ws, err := c.WorkspaceAgentReconnectingPTY(ctx, agentID, opts)
	if err != nil {
		t.Fatalf("open web terminal %s: %v", opts.Reconnect, err)
	}
	p := &ptyTerm{t: t, ws: ws, closed: make(chan struct{})}
	go func() {
		defer close(p.closed)
		for {
			typ, msg, err := ws.Read(context.Background())
			if err != nil {
				p.err = err
				return
			}
			if typ != websocket.MessageBinary {
				p.err = errors.New("got a text message from coderd")
				return
			}
			_, _ = p.out.Write(msg)
		}
	}()
	t.Cleanup(func() { _ = ws.CloseNow() })
	return p
}

func (p *ptyTerm) send(req codersdk.ReconnectingPTYRequest) {
	p.t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		p.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.ws.Write(ctx, websocket.MessageText, b); err != nil {
		p.t.Fatalf("send %s: %v", b, err)
	}
}

func (p *ptyTerm) typeLine(line string) {
	p.t.Helper()
	p.send(codersdk.ReconnectingPTYRequest{Data: line + "\r"})
}

// waitOutput waits until the output matches re.
func (p *ptyTerm) waitOutput(re string) {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	testwait.For(p.t, 20*time.Second, "the output matching "+re, func() (bool, string) {
		out := p.out.String()
		return rx.MatchString(out), "no " + re + " in the output:\n" + out
	})
}

// waitClosed waits for the WebSocket's end and returns its close status.
func (p *ptyTerm) waitClosed() websocket.StatusCode {
	p.t.Helper()
	select {
	case <-p.closed:
		return websocket.CloseStatus(p.err)
	case <-time.After(20 * time.Second):
		p.t.Fatalf("the web terminal is still open; output:\n%s", p.out.String())
		return 0
	}
}

func (p *ptyTerm) close() {
	p.t.Helper()
	_ = p.ws.Close(websocket.StatusNormalClosure, "")
	<-p.closed
}

// TestReconnectingPTY drives the web terminal end to end: a browser-like
// WebSocket client, coderd's relay, the agent and a real login shell. The
// agent runs on a mock clock, which only IdleTimeoutKills steps (through
// the default idle timeout); the clock's other tickers are kept out of its
// way (no port scan, a log flush an hour apart).
func TestReconnectingPTY(t *testing.T) {
	clock := coderdtest.NewClock(t)
	const idle = 5 * time.Minute // the agent's default
	e := newRelayEnv(t, func(o *agent.Options) {
		o.Clock, o.PortsInterval, o.LogFlushInterval = clock, -1, time.Hour
	})
	e.waitReady(t, e.alice)
	id := uuid.NewString()

	first := dialPTY(t, e.alice, e.agentID, codersdk.ReconnectingPTYOptions{Reconnect: id, Width: 100, Height: 30})
	t.Run("Echo", func(t *testing.T) {
		first.t = t
		first.typeLine("echo hi-$((40+2))")
		first.waitOutput(`hi-42`)
	})
	t.Run("Resize", func(t *testing.T) {
		first.t = t
		first.typeLine("stty size | sed 's/^/size=/'")
		first.waitOutput(`size=30 100`)
		first.send(codersdk.ReconnectingPTYRequest{Height: 50, Width: 120})
		first.typeLine("stty size | sed 's/^/size=/'")
		first.waitOutput(`size=50 120`)
	})
	t.Run("EnvAndFolder", func(t *testing.T) {
		first.t = t
		first.typeLine(`echo "env=$FROM_TEMPLATE:$TERM:$CODER_WORKSPACE_NAME pwd=$(pwd)"`)
		first.waitOutput(`env=yes:xterm-256color:dev pwd=` + regexp.QuoteMeta(e.dir))
	})
	t.Run("ReconnectReplaysAndKeepsTheShell", func(t *testing.T) {
		first.t = t
		first.typeLine("PTYVAR=kept-$((6*7))")
		first.typeLine(`echo "set=$PTYVAR"`)
		first.waitOutput(`set=kept-42`)
		first.close()
		again := dialPTY(t, e.alice, e.agentID, codersdk.ReconnectingPTYOptions{Reconnect: id})
		again.waitOutput(`(?s)hi-42.*set=kept-42`) // replayed before anything is typed
		again.typeLine(`echo "var=$PTYVAR"`)
		again.waitOutput(`var=kept-42`)

		// A second tab on the same session: both see what either types.
		tab := dialPTY(t, e.alice, e.agentID, codersdk.ReconnectingPTYOptions{Reconnect: id})
		tab.waitOutput(`var=kept-42`)
		tab.typeLine("echo tab-$((1+1))")
		again.waitOutput(`tab-2`)
		tab.waitOutput(`tab-2\r?\n`)
		tab.close()
		again.close()
	})
	t.Run("OtherIDFreshShell", func(t *testing.T) {
		other := dialPTY(t, e.alice, e.agentID, codersdk.ReconnectingPTYOptions{Reconnect: uuid.NewString()})
		other.typeLine(`echo "var=[$PTYVAR]"`)
		other.waitOutput(`var=\[\]`)
		if strings.Contains(other.out.String(), "hi-42") {
			t.Errorf("a new session replayed another session's output:\n%s", other.out.String())
		}
		other.close()
	})
	t.Run("Command", func(t *testing.T) {
		cmd := dialPTY(t, e.alice, e.agentID, codersdk.ReconnectingPTYOptions{Reconnect: uuid.NewString(), Command: "echo cmd-$((2+3)); sleep 0.2"})
		cmd.waitOutput(`cmd-5`)
		if got := cmd.waitClosed(); got != websocket.StatusNormalClosure {
			t.Errorf("a command that exited: got close status %d, want %d (normal)", got, websocket.StatusNormalClosure)
		}
	})
	t.Run("ExitEndsTheSession", func(t *testing.T) {
		p := dialPTY(t, e.alice, e.agentID, codersdk.ReconnectingPTYOptions{Reconnect: id})
		p.typeLine("exit")
		if got := p.waitClosed(); got != websocket.StatusNormalClosure {
			t.Fatalf("after exit: got close status %d (%v), want %d (normal)", got, p.err, websocket.StatusNormalClosure)
		}
		fresh := dialPTY(t, e.alice, e.agentID, codersdk.ReconnectingPTYOptions{Reconnect: id})
		fresh.typeLine(`echo "var=[$PTYVAR]"`)
		fresh.waitOutput(`var=\[\]`)
		fresh.close()
	})
	t.Run("IdleTimeoutKills", func(t *testing.T) {
		ctx := coderdtest.ClockContext(t)
		id := uuid.NewString()
		armed := clock.Trap().AfterFunc("agent", "ptyIdle", id)
		defer armed.Close()
		p := dialPTY(t, e.alice, e.agentID, codersdk.ReconnectingPTYOptions{Reconnect: id})
		p.typeLine(`echo "pid=$$."`)
		p.waitOutput(`pid=\d+\.`)
		m := regexp.MustCompile(`pid=(\d+)\.`).FindStringSubmatch(p.out.String())
		pid, _ := strconv.Atoi(m[1])
		p.close()
		// The client left: the idle timeout starts.
		call := armed.MustWait(ctx)
		call.MustRelease(ctx)
		if call.Duration != idle {
			t.Errorf("a session without clients is kept %s, want %s", call.Duration, idle)
		}
		coderdtest.AdvanceClock(ctx, t, clock, idle-time.Millisecond)
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("the shell (pid %d) is gone a millisecond before the idle timeout: %v", pid, err)
		}
		coderdtest.AdvanceClock(ctx, t, clock, time.Millisecond)
		testwait.For(t, 10*time.Second, "the idle shell ended", func() (bool, string) {
			err := syscall.Kill(pid, 0)
			return errors.Is(err, syscall.ESRCH), "the shell (pid " + m[1] + ") still runs"
		})
		again := dialPTY(t, e.alice, e.agentID, codersdk.ReconnectingPTYOptions{Reconnect: id})
		again.typeLine(`echo "new=$$."`)
		again.waitOutput(`new=\d+\.`)
		if strings.Contains(again.out.String(), "pid=") {
			t.Errorf("a session after the timeout replayed the old one's output:\n%s", again.out.String())
		}
		again.close()
	})
	t.Run("Refused", func(t *testing.T) {
		ctx := context.Background()
		for _, tc := range []struct {
			name   string
			client *codersdk.Client
			opts   codersdk.ReconnectingPTYOptions
			want   int
		}{
			{"OtherMember", e.member, codersdk.ReconnectingPTYOptions{Reconnect: uuid.NewString()}, http.StatusNotFound},
			{"TemplateAdmin", e.tadmin, codersdk.ReconnectingPTYOptions{Reconnect: uuid.NewString()}, http.StatusForbidden},
			{"NoReconnectID", e.alice, codersdk.ReconnectingPTYOptions{}, http.StatusBadRequest},
			{"ReconnectNotUUID", e.alice, codersdk.ReconnectingPTYOptions{Reconnect: "../etc"}, http.StatusBadRequest},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ws, err := tc.client.WorkspaceAgentReconnectingPTY(ctx, e.agentID, tc.opts)
				if err == nil {
					_ = ws.CloseNow()
				}
				if !codersdk.IsStatus(err, tc.want) {
					t.Errorf("got %v, want status %d", err, tc.want)
				}
			})
		}
		// The deployment owner may, as with connect.
		p := dialPTY(t, e.admin, e.agentID, codersdk.ReconnectingPTYOptions{Reconnect: uuid.NewString()})
		p.typeLine("echo owner-$((1+2))")
		p.waitOutput(`owner-3`)
		p.close()
	})
}
