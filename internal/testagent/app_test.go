package testagent_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"airgapcoder/internal/testagent"
)

// TestApp: an App answers "app <path>?<query>" and closes the connection,
// records every request (Last, Request by path, Count), and a client from
// NewAppClient reaches it under a made-up host name.
func TestApp(t *testing.T) {
	t.Parallel()
	app := testagent.NewApp(t, nil)
	if want := "http://127.0.0.1:" + strconv.Itoa(app.Port); app.URL() != want {
		t.Errorf("URL: got %q, want %q", app.URL(), want)
	}
	c, _ := testagent.NewAppClient(t, "127.0.0.1:"+strconv.Itoa(app.Port), ".apps.test", false)
	base := "http://own--dev--alice.apps.test:" + strconv.Itoa(app.Port)
	resp, body := testagent.Do(t, c, http.MethodGet, base+"/a?x=1", http.Header{"X-Test": {"one"}})
	if resp.StatusCode != http.StatusOK || body != "app /a?x=1" || !resp.Close {
		t.Errorf("GET /a: got %d %q (close %v), want 200 %q and the connection closed", resp.StatusCode, body, resp.Close, "app /a?x=1")
	}
	testagent.Do(t, c, http.MethodPost, base+"/b", nil)
	if got := app.Count(); got != 2 {
		t.Errorf("Count: got %d, want 2", got)
	}
	if got := app.Last(t); got.Method != http.MethodPost || got.URL.Path != "/b" {
		t.Errorf("Last: got %s %s, want POST /b", got.Method, got.URL.Path)
	}
	if got := app.Request(t, "/a"); got.Header.Get("X-Test") != "one" || !strings.HasPrefix(got.Host, "own--dev--alice.apps.test:") {
		t.Errorf("Request(/a): got Host %q, X-Test %q; want the app host and %q", got.Host, got.Header.Get("X-Test"), "one")
	}
}

// TestEchoWebSocket: an app that echoes WebSockets answers the message with
// its prefix, through WebSocketRoundTrip.
func TestEchoWebSocket(t *testing.T) {
	t.Parallel()
	app := testagent.NewApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		testagent.EchoWebSocket(w, r, nil, "echo: ")
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := "ws://127.0.0.1:" + strconv.Itoa(app.Port) + "/ws"
	if got := testagent.WebSocketRoundTrip(ctx, t, u, nil, websocket.MessageText, "ping"); got != "echo: ping" {
		t.Errorf("got %q, want %q", got, "echo: ping")
	}
	if got := app.Request(t, "/ws").Header.Get("Upgrade"); !strings.EqualFold(got, "websocket") {
		t.Errorf("the app's request: Upgrade %q, want websocket", got)
	}
}
