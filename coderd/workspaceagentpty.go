package coderd

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/hashicorp/yamux"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// The web terminal: GET /api/v2/workspaceagents/{agent}/pty relays a
// browser's WebSocket to a reconnecting PTY of the agent (a stream of kind
// pty; agent/reconnectingpty.go). Output comes from the agent as raw bytes
// and goes to the browser as binary messages; the browser's text messages
// (codersdk.ReconnectingPTYRequest JSON) go to the agent as relay frames.
// The end of the agent's stream is the end of the terminal's process: the
// WebSocket closes with 1000. A browser that stops reading for
// ptyWriteTimeout is dropped (1008), so that it does not hold up the
// terminal's other clients; a dead agent connection closes with 1011 and a
// stopping coderd with 1001, after which the browser may reconnect with the
// same id. The connection is audited like other relayed connections (kind
// pty).

const (
	// ptyWriteTimeout is how long output may wait for a browser.
	ptyWriteTimeout = 30 * time.Second
	// ptyReadLimit caps one browser message (a large paste).
	ptyReadLimit = 1 << 20
	// ptyChunk is the most input bytes in one frame to the agent: JSON may
	// escape a byte into six, and a frame holds relayconn.MaxFrame.
	ptyChunk = 2 << 10
)

// ptyHeaderFromQuery reads ?reconnect=UUID&width=N&height=N&command=C.
func ptyHeaderFromQuery(c *gin.Context) (codersdk.RelayHeader, error) {
	p := &codersdk.RelayPTY{Reconnect: c.Query("reconnect"), Command: c.Query("command")}
	hdr := codersdk.RelayHeader{Kind: codersdk.RelayKindPTY, ConnID: newConnID(), PTY: p}
	id, err := uuid.Parse(p.Reconnect)
	if err != nil {
		return hdr, validation("reconnect", "must be a UUID naming the terminal session")
	}
	p.Reconnect = id.String()
	size := func(name string, def uint16) (uint16, error) {
		s := c.Query(name)
		if s == "" {
			return def, nil
		}
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil || n == 0 {
			return 0, validation(name, "must be a number of character cells (1-65535)")
		}
		return uint16(n), nil
	}
	if p.Width, err = size("width", 80); err != nil {
		return hdr, err
	}
	if p.Height, err = size("height", 24); err != nil {
		return hdr, err
	}
	if len(p.Command) > 4096 {
		return hdr, validation("command", "must be at most 4096 bytes")
	}
	return hdr, nil
}

// workspaceAgentPTY relays a browser's web terminal WebSocket to the
// agent's reconnecting PTY. Only the workspace's owner and users with the
// owner role may.
func (api *API) workspaceAgentPTY(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionConnect, codersdk.AuditResourceWorkspaceAgent).resource(c.Param("agent"), "").
		field("kind", codersdk.RelayKindPTY)
	stream, err := api.openAgentStream(c, e, ptyHeaderFromQuery)
	if err != nil {
		return err
	}
	hdr, log := stream.hdr, stream.log
	ws, err := websocket.Accept(c.Writer, c.Request, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		_ = stream.Close()
		return nil
	}
	defer ws.CloseNow()
	ws.SetReadLimit(ptyReadLimit)
	log.Info("relay connection opened")
	defer api.trackSession(c.Param("agent"))() // activity moves the deadline (schedules_activity.go)
	began := time.Now()
	up, down := api.relayPTY(c.Request.Context(), ws, stream, stream.mux, log)
	log.Info("relay connection closed", "bytes_to_agent", up, "bytes_from_agent", down, "duration", time.Since(began).Round(time.Millisecond))
	api.auditRelayed(c.Request.Context(), e, hdr, began, up, down)
	return nil
}

// relayPTY copies the agent's output to ws and ws's requests to the agent
// until either ends, and returns the bytes sent each way on the stream.
func (api *API) relayPTY(ctx context.Context, ws *websocket.Conn, stream net.Conn, mux *yamux.Session, log *slog.Logger) (toAgent, fromAgent int64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var to, from atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		// Either side's end ends the other; a stopping coderd ends both.
		select {
		case <-api.closing:
			_ = ws.Close(websocket.StatusGoingAway, "coderd is shutting down")
		case <-ctx.Done():
		}
		_ = stream.Close()
		_ = stream.SetReadDeadline(time.Now())
	})
	wg.Go(func() {
		defer cancel()
		buf := make([]byte, 32<<10)
		for {
			n, err := stream.Read(buf)
			if n > 0 {
				from.Add(int64(n))
				wctx, wcancel := context.WithTimeout(ctx, ptyWriteTimeout)
				werr := ws.Write(wctx, websocket.MessageBinary, buf[:n])
				timedOut := wctx.Err() == context.DeadlineExceeded
				wcancel()
				if werr != nil {
					if timedOut {
						log.Info("web terminal client stopped reading; dropping it")
						_ = ws.Close(websocket.StatusPolicyViolation, "the client stopped reading the terminal's output")
					}
					return
				}
			}
			if err != nil {
				if ctx.Err() != nil {
					return // the browser's side ended first
				}
				switch {
				case err != io.EOF || mux.IsClosed():
					_ = ws.Close(websocket.StatusInternalError, "the workspace agent disconnected")
				default:
					_ = ws.Close(websocket.StatusNormalClosure, "the terminal's process exited")
				}
				return
			}
		}
	})
	wg.Go(func() {
		defer cancel()
		for {
			typ, msg, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var req codersdk.ReconnectingPTYRequest
			if typ != websocket.MessageText || json.Unmarshal(msg, &req) != nil {
				_ = ws.Close(websocket.StatusUnsupportedData, `messages must be text: {"data":"...","height":N,"width":N}`)
				return
			}
			n, err := writePTYRequest(stream, req)
			to.Add(n)
			if err != nil {
				return
			}
		}
	})
	wg.Wait()
	return to.Load(), from.Load()
}

// writePTYRequest sends req to the agent as relay frames, its data cut at
// character boundaries into frames of at most ptyChunk bytes, the resize
// with the last one. It returns the bytes written.
func writePTYRequest(w io.Writer, req codersdk.ReconnectingPTYRequest) (int64, error) {
	cw := &countingWriter{w: w}
	data := req.Data
	for len(data) > ptyChunk {
		cut := ptyChunk
		for cut > 0 && !utf8.RuneStart(data[cut]) {
			cut--
		}
		if cut == 0 {
			cut = ptyChunk
		}
		if err := relayconn.WriteFrame(cw, codersdk.ReconnectingPTYRequest{Data: data[:cut]}); err != nil {
			return cw.n, err
		}
		data = data[cut:]
	}
	req.Data = data
	err := relayconn.WriteFrame(cw, req)
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
