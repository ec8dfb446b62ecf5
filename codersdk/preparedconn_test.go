package codersdk_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// TestPreparedConnLost: a prepared connection that coderd dropped while it
// waited (a restart, or its idle limit) says so with ErrPreparedConnLost,
// which tells the CLI to prepare another rather than report a failure; a
// refusal coderd sends is an *Error with its status.
func TestPreparedConnLost(t *testing.T) {
	drop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := relayconn.AcceptUpgrade(w)
		if err != nil {
			return
		}
		if r.URL.Query().Get("prepare") == "" {
			_ = conn.Close()
			return
		}
		var target codersdk.RelayTarget
		if r.Header.Get(codersdk.SessionTokenHeader) == "refuse" {
			_ = relayconn.ReadFrame(conn, &target)
			_ = relayconn.WriteFrame(conn, codersdk.RelayTargetReply{StatusCode: http.StatusServiceUnavailable, Response: codersdk.Response{Message: "agent away"}})
		} else {
			<-drop
		}
		_ = conn.Close()
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	c := codersdk.New(u)
	ctx := context.Background()

	p, err := c.PrepareWorkspaceAgentConn(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	close(drop)
	if _, err := p.Connect(ctx, codersdk.DialOptions{}); !errors.Is(err, codersdk.ErrPreparedConnLost) {
		t.Fatalf("connect on a dropped prepared connection: got %v, want ErrPreparedConnLost", err)
	}

	c.SessionToken = "refuse"
	p, err = c.PrepareWorkspaceAgentConn(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Connect(ctx, codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: 80})
	if !codersdk.IsAgentUnavailable(err) || errors.Is(err, codersdk.ErrPreparedConnLost) {
		t.Fatalf("connect refused by coderd: got %v, want its 503", err)
	}
}
