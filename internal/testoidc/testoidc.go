// Package testoidc is the relying party of tests that sign in against a
// real OpenID Connect provider (testidp's Hydra, testgitea's Gitea): a
// redirect URI that records what the provider sends the browser back with,
// and one authorization-code flow with PKCE, state and nonce, whose steps
// (code, exchange, ID token verification, userinfo, refresh) fail the test
// with what went wrong.
//
// It holds no provider of its own and trusts only the client it is given.
// It is for tests only.
package testoidc

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// CallbackBody is what the callback answers the browser with.
const CallbackBody = "signed in"

// Callback is a relying party's redirect URI: it records the query the
// provider sends the browser back with and answers [CallbackBody].
type Callback struct {
	// URL is the redirect URI, "http://127.0.0.1:PORT/callback".
	URL string

	mu    sync.Mutex
	query url.Values
}

// NewCallback serves a redirect URI until t's cleanup.
func NewCallback(t testing.TB) *Callback {
	t.Helper()
	cb := &Callback{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r) // a browser's /favicon.ico, say: not the redirect
			return
		}
		cb.mu.Lock()
		cb.query = r.URL.Query()
		cb.mu.Unlock()
		_, _ = io.WriteString(w, CallbackBody)
	}))
	t.Cleanup(srv.Close)
	cb.URL = srv.URL + "/callback"
	return cb
}

// Query returns the query of the last redirect, nil before the first.
func (cb *Callback) Query() url.Values {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.query
}

// Flow is one relying party's view of an authorization-code flow with
// PKCE and nonce. Its fields may be changed between steps (a new Nonce for
// a second sign-in, another client in Config).
type Flow struct {
	// Callback is the redirect URI, Config.RedirectURL.
	Callback *Callback
	// Client talks to the provider (it must trust the provider's CA); Ctx
	// carries it for go-oidc and oauth2.
	Client *http.Client
	Ctx    context.Context
	// Provider is the discovered provider.
	Provider *oidc.Provider
	// Config is the OAuth2 client: its ID, secret and scopes, the
	// provider's endpoints and the callback.
	Config oauth2.Config
	// State, Nonce and Verifier (PKCE) are fresh random values.
	State, Nonce, Verifier string
}

// NewFlow discovers the provider at issuer through client and returns a
// flow for the OAuth2 client id and secret, redirecting to cb, asking for
// scopes. client's idle connections are closed at t's cleanup.
func NewFlow(t testing.TB, client *http.Client, issuer string, cb *Callback, id, secret string, scopes ...string) *Flow {
	t.Helper()
	t.Cleanup(client.CloseIdleConnections)
	ctx := oidc.ClientContext(t.Context(), client)
	provider, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	return &Flow{
		Callback: cb, Client: client, Ctx: ctx, Provider: provider,
		Config: oauth2.Config{
			ClientID: id, ClientSecret: secret, Endpoint: provider.Endpoint(), RedirectURL: cb.URL,
			Scopes: scopes,
		},
		State:    oauth2.GenerateVerifier(),
		Nonce:    oauth2.GenerateVerifier(),
		Verifier: oauth2.GenerateVerifier(),
	}
}

// AuthURL is where the browser starts: the authorization request with the
// state, nonce and PKCE challenge, and opts.
func (f *Flow) AuthURL(opts ...oauth2.AuthCodeOption) string {
	opts = append(opts, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier))
	return f.Config.AuthCodeURL(f.State, opts...)
}

// Code returns the code the callback got, checking that it got no error,
// the flow's state and a code.
func (f *Flow) Code(t testing.TB) string {
	t.Helper()
	q := f.Callback.Query()
	if q.Get("error") != "" {
		t.Fatalf("callback got error %q: %s", q.Get("error"), q.Get("error_description"))
	}
	if got := q.Get("state"); got != f.State {
		t.Fatalf("callback state = %q, want %q", got, f.State)
	}
	if q.Get("code") == "" {
		t.Fatalf("callback got no code: %v", q)
	}
	return q.Get("code")
}

// Exchange exchanges the callback's code (see Code) with the PKCE
// verifier for tokens.
func (f *Flow) Exchange(t testing.TB) *oauth2.Token {
	t.Helper()
	tok, err := f.Config.Exchange(f.Ctx, f.Code(t), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	return tok
}

// Verify checks the ID token of tok (its signature, audience, issuer and
// nonce), decodes its claims into claims and returns it.
func (f *Flow) Verify(t testing.TB, tok *oauth2.Token, claims any) *oidc.IDToken {
	t.Helper()
	raw, ok := tok.Extra("id_token").(string)
	if !ok {
		t.Fatal("token response has no id_token")
	}
	idt, err := f.Provider.Verifier(&oidc.Config{ClientID: f.Config.ClientID}).Verify(f.Ctx, raw)
	if err != nil {
		t.Fatalf("verify ID token: %v", err)
	}
	if idt.Nonce != f.Nonce {
		t.Errorf("nonce = %q, want %q", idt.Nonce, f.Nonce)
	}
	if err := idt.Claims(claims); err != nil {
		t.Fatalf("decode ID token claims: %v", err)
	}
	return idt
}

// UserInfo asks the userinfo endpoint with tok's access token and decodes
// its claims into claims.
func (f *Flow) UserInfo(t testing.TB, tok *oauth2.Token, claims any) *oidc.UserInfo {
	t.Helper()
	info, err := f.Provider.UserInfo(f.Ctx, oauth2.StaticTokenSource(tok))
	if err != nil {
		t.Fatalf("userinfo: %v", err)
	}
	if err := info.Claims(claims); err != nil {
		t.Fatalf("decode userinfo claims: %v", err)
	}
	return info
}

// Refresh uses tok's refresh token, which must be there, as a relying
// party does when the access token has expired.
func (f *Flow) Refresh(t testing.TB, tok *oauth2.Token) *oauth2.Token {
	t.Helper()
	if tok.RefreshToken == "" {
		t.Fatal("no refresh token")
	}
	expired := &oauth2.Token{RefreshToken: tok.RefreshToken, Expiry: time.Unix(1, 0)}
	refreshed, err := f.Config.TokenSource(f.Ctx, expired).Token()
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	return refreshed
}

// CheckTrust checks what a provider's test CA is for: discovery at issuer
// from a client without it fails with Go's unknown-authority error (which
// other tests look for), and from trusting, a client given it, works.
// trusting's idle connections are closed at t's cleanup.
func CheckTrust(t testing.TB, issuer string, trusting *http.Client) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{}}}
	t.Cleanup(client.CloseIdleConnections)
	t.Cleanup(trusting.CloseIdleConnections)
	_, err := oidc.NewProvider(oidc.ClientContext(t.Context(), client), issuer)
	const want = "x509: certificate signed by unknown authority"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("discovery without the test CA: got %v, want an error containing %q", err, want)
	}
	if _, err := oidc.NewProvider(oidc.ClientContext(t.Context(), trusting), issuer); err != nil {
		t.Errorf("discovery with the CA: %v", err)
	}
}

// Claims are the claims an ID token or a userinfo answer carries for the
// scopes openid, email, profile and groups, the ones coderd signs users in
// with. Decode into it with [Flow.Verify] or [Flow.UserInfo]; a provider's
// own claims go in a struct that embeds it.
type Claims struct {
	Email             string   `json:"email"`
	EmailVerified     bool     `json:"email_verified"`
	Name              string   `json:"name"`
	PreferredUsername string   `json:"preferred_username"`
	Groups            []string `json:"groups"`
}

// Equal reports whether c and o hold the same claims, groups in the same
// order.
func (c Claims) Equal(o Claims) bool {
	return c.Email == o.Email && c.EmailVerified == o.EmailVerified && c.Name == o.Name &&
		c.PreferredUsername == o.PreferredUsername && slices.Equal(c.Groups, o.Groups)
}
