package codersdk_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	"airgapcoder/codersdk"
)

// TestListQueries: the list calls send their filter and page as the
// server reads them (q, limit, offset), leaving out what is unset.
func TestListQueries(t *testing.T) {
	var mu sync.Mutex
	var got *url.URL
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.URL
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := codersdk.New(u)
	c.HTTPClient = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.HTTPClient.CloseIdleConnections)
	ctx := context.Background()

	for _, tc := range []struct {
		name      string
		call      func() error
		wantPath  string
		wantQuery string
	}{
		{"workspaces, no filter", func() error { _, err := c.Workspaces(ctx, codersdk.WorkspaceFilter{}); return err },
			"/api/v2/workspaces", ""},
		{"workspaces, owner and name", func() error {
			_, err := c.Workspaces(ctx, codersdk.WorkspaceFilter{Owner: "me", Name: "dev"})
			return err
		}, "/api/v2/workspaces", "q=owner%3Ame+name%3Adev"},
		{"workspaces, name and page", func() error {
			_, err := c.Workspaces(ctx, codersdk.WorkspaceFilter{Name: "dev", Limit: 10, Offset: 20})
			return err
		}, "/api/v2/workspaces", "limit=10&offset=20&q=name%3Adev"},
		{"audit, no filter", func() error { _, err := c.AuditLogs(ctx, codersdk.AuditLogsRequest{}); return err },
			"/api/v2/audit", ""},
		{"audit, query and page", func() error {
			_, err := c.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "action:create", Limit: 5, Offset: 1})
			return err
		}, "/api/v2/audit", "limit=5&offset=1&q=action%3Acreate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if got.Path != tc.wantPath || got.RawQuery != tc.wantQuery {
				t.Errorf("got %s?%s, want %s?%s", got.Path, got.RawQuery, tc.wantPath, tc.wantQuery)
			}
		})
	}
}
