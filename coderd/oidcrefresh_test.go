package coderd_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testidp"
)

// TestOIDCSessionRefresh: a session from the IdP is refreshed at the IdP
// once the IdP's access token expired, and ends when the IdP refuses.
func TestOIDCSessionRefresh(t *testing.T) {
	var skew atomic.Int64 // coderd's clock runs this far ahead
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	e := newOIDCEnv(t, oidcEnvOptions{now: now, config: func(c *coderd.OIDCConfig) {
		c.Scopes = []string{"openid", "profile", "email", "offline_access"}
	}})
	ctx := context.Background()
	owner, _ := e.d.CreateFirstUser(t)
	e.idp.AddUser(testidp.User{Username: "carol", Subject: "sub-carol", Email: "carol@corp.example", EmailVerified: true})

	b := newBrowser(t, e.browser.Transport.(*http.Transport).TLSClientConfig.RootCAs)
	if status, u, body := e.signIn(t, b, "carol", ""); status != http.StatusOK {
		t.Fatalf("sign in: got %d at %s: %s", status, u, body)
	}
	carol := e.sessionClient(t, b)
	me, err := carol.User(ctx, codersdk.Me)
	if err != nil {
		t.Fatal(err)
	}
	link, err := e.d.DB.UserLinkByUser(ctx, me.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Hydra's refresh tokens read "ory_rt_…": the column holds a sealed one.
	if link.OAuthRefreshToken == "" || strings.Contains(link.OAuthRefreshToken, "ory_rt_") || link.OAuthExpiry.IsZero() {
		t.Fatalf("user link: got refresh token %q expiry %v, want a sealed token and an expiry", link.OAuthRefreshToken, link.OAuthExpiry)
	}

	// Hydra's access tokens last an hour.
	skew.Add(int64(2 * time.Hour))
	if _, err := carol.User(ctx, codersdk.Me); err != nil {
		t.Fatalf("after the IdP token expired: got %v, want the session refreshed", err)
	}
	refreshed, err := e.d.DB.UserLinkByUser(ctx, me.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Hydra rotates refresh tokens: the new one is kept.
	if refreshed.OAuthRefreshToken == link.OAuthRefreshToken {
		t.Fatalf("after refresh: got the same refresh token, want the new one kept")
	}

	e.idp.RevokeConsent(t, "sub-carol")
	if _, err := carol.User(ctx, codersdk.Me); err != nil {
		t.Fatalf("before the IdP token expired: got %v, want the session still valid", err)
	}
	skew.Add(int64(2 * time.Hour))
	_, err = carol.User(ctx, codersdk.Me)
	if !codersdk.IsStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), "identity provider ended this session") {
		t.Fatalf("after the IdP revoked: got %v, want 401 saying the identity provider ended the session", err)
	}
	_, err = carol.User(ctx, codersdk.Me)
	if err == nil || !strings.Contains(err.Error(), "no such key") {
		t.Fatalf("the ended session again: got %v, want its key gone", err)
	}
	logs, err := owner.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "username:carol action:logout"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range logs.AuditLogs {
		var f map[string]any
		_ = json.Unmarshal(l.AdditionalFields, &f)
		found = found || (f["idp_subject"] == "sub-carol" && f["source"] == "oidc_refresh")
	}
	if !found {
		t.Fatalf("audit: got %+v, want a logout with idp_subject sub-carol", logs.AuditLogs)
	}
}

// TestOIDCSessionWithoutRefreshToken: without offline_access the IdP gives
// no refresh token and the session lasts its own duration.
func TestOIDCSessionWithoutRefreshToken(t *testing.T) {
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	e := newOIDCEnv(t, oidcEnvOptions{now: now})
	ctx := context.Background()
	e.d.CreateFirstUser(t)
	e.idp.AddUser(testidp.User{Username: "dan", Email: "dan@corp.example", EmailVerified: true})
	if status, u, body := e.signIn(t, e.browser, "dan", ""); status != http.StatusOK {
		t.Fatalf("sign in: got %d at %s: %s", status, u, body)
	}
	dan := e.sessionClient(t, e.browser)
	skew.Add(int64(2 * time.Hour))
	if _, err := dan.User(ctx, codersdk.Me); err != nil {
		t.Fatalf("got %v, want the session valid", err)
	}
}

// TestLogoutAllSessions: an owner ends every session and token of a user.
func TestLogoutAllSessions(t *testing.T) {
	e := newOIDCEnv(t, oidcEnvOptions{})
	ctx := context.Background()
	owner, _ := e.d.CreateFirstUser(t)
	e.idp.AddUser(testidp.User{Username: "frank", Email: "frank@corp.example", EmailVerified: true})
	var frank []*codersdk.Client
	for range 2 {
		b := newBrowser(t, e.browser.Transport.(*http.Transport).TLSClientConfig.RootCAs)
		if status, u, body := e.signIn(t, b, "frank", ""); status != http.StatusOK {
			t.Fatalf("sign in: got %d at %s: %s", status, u, body)
		}
		frank = append(frank, e.sessionClient(t, b))
	}
	me, err := frank[0].User(ctx, codersdk.Me)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := frank[0].CreateToken(ctx, codersdk.Me, codersdk.CreateTokenRequest{TokenName: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	withToken := e.d.Client()
	withToken.SessionToken = tok.Key
	frank = append(frank, withToken)
	member, _ := e.d.CreateUser(t, owner, "grace")

	if err := member.LogoutAll(ctx, me.ID); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("a member ending another's sessions: got %v, want 403", err)
	}
	if err := owner.LogoutAll(ctx, me.Username); err != nil {
		t.Fatal(err)
	}
	for i, c := range frank {
		if _, err := c.User(ctx, codersdk.Me); !codersdk.IsStatus(err, http.StatusUnauthorized) {
			t.Fatalf("frank's key %d after logout-all: got %v, want 401", i, err)
		}
	}
	if _, err := member.User(ctx, codersdk.Me); err != nil {
		t.Fatalf("another user's session: got %v, want it untouched", err)
	}
	logs, err := owner.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "resource_type:api_key action:delete"})
	if err != nil || len(logs.AuditLogs) == 0 || !strings.Contains(string(logs.AuditLogs[0].AdditionalFields), `"keys_deleted":3`) {
		t.Fatalf("audit: got %+v, %v; want the logout-all with keys_deleted 3", logs.AuditLogs, err)
	}
}
