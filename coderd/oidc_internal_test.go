package coderd

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestOIDCStateCookie(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	s, err := newOIDCSealer("deployment-secret")
	if err != nil {
		t.Fatal(err)
	}
	want := oidcState{State: "st", Nonce: "n", Verifier: "v", Redirect: "/templates", Expires: now.Add(oidcStateLifetime)}
	sealed, err := s.seal(want)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "templates") {
		t.Errorf("the cookie shows its content: %q", sealed)
	}
	got, err := s.open(sealed, "st", now)
	if err != nil || got != want {
		t.Fatalf("open: got %+v, %v; want %+v", got, err, want)
	}
	other, _ := newOIDCSealer("another-deployment")
	tampered := []byte(sealed)
	tampered[len(tampered)/2] ^= 1
	for _, tc := range []struct {
		name, cookie, state string
		now                 time.Time
		sealer              *oidcSealer
	}{
		{"wrong state", sealed, "other", now, s},
		{"empty state", sealed, "", now, s},
		{"expired", sealed, "st", now.Add(oidcStateLifetime), s},
		{"tampered", string(tampered), "st", now, s},
		{"other key", sealed, "st", now, other},
		{"garbage", "%%%", "st", now, s},
		{"empty", "", "st", now, s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.sealer.open(tc.cookie, tc.state, tc.now); !errors.Is(err, errOIDCState) {
				t.Errorf("got %v, want errOIDCState", err)
			}
		})
	}
}

func TestIdentityFromClaims(t *testing.T) {
	cfg := OIDCConfig{IssuerURL: "https://idp.test"}
	cfg.setDefaults()
	domain := cfg
	domain.EmailDomain = []string{"corp.example"}
	ignore := cfg
	ignore.IgnoreEmailVerified = true
	for _, tc := range []struct {
		name       string
		cfg        OIDCConfig
		claims     map[string]any
		wantUser   string
		wantReason string
	}{
		{"preferred username", cfg, map[string]any{"email": "ann@corp.example", "email_verified": true, "preferred_username": "ann.lee"}, "ann-lee", ""},
		{"email local part", cfg, map[string]any{"email": "bob_smith@corp.example"}, "bob-smith", ""},
		{"no email", cfg, map[string]any{"preferred_username": "x"}, "", "no_email"},
		{"unverified", cfg, map[string]any{"email": "c@corp.example", "email_verified": false}, "", "email_not_verified"},
		{"unverified ignored", ignore, map[string]any{"email": "c@corp.example", "email_verified": false}, "c", ""},
		{"domain allowed", domain, map[string]any{"email": "d@CORP.example"}, "d", ""},
		{"domain refused", domain, map[string]any{"email": "d@evil.example"}, "", "email_domain"},
		{"subdomain refused", domain, map[string]any{"email": "d@x.corp.example"}, "", "email_domain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := identityFromClaims(tc.cfg, "sub", tc.claims)
			var r *oidcRefusal
			switch {
			case tc.wantReason == "" && err != nil:
				t.Fatalf("got error %v, want none", err)
			case tc.wantReason != "" && (!errors.As(err, &r) || r.Reason != tc.wantReason):
				t.Fatalf("got error %v, want refusal %q", err, tc.wantReason)
			case tc.wantReason == "" && id.Username != tc.wantUser:
				t.Errorf("got username %q, want %q", id.Username, tc.wantUser)
			}
		})
	}
}

func TestUsernameFrom(t *testing.T) {
	for in, want := range map[string]string{
		"alice":                         "alice",
		"Alice Lee":                     "Alice-Lee",
		"--a__b--":                      "a-b",
		"élodie":                        "lodie",
		"":                              "",
		"!!!":                           "",
		strings.Repeat("abcdefghij", 4): "abcdefghijabcdefghijabcdefghijab",
	} {
		if got := usernameFrom(in); got != want {
			t.Errorf("usernameFrom(%q): got %q, want %q", in, got, want)
		}
	}
}

func TestMergeClaims(t *testing.T) {
	got := mergeClaims(map[string]any{"sub": "a", "email": "id@x"}, map[string]any{"sub": "b", "email": "info@x", "name": "N"})
	if got["sub"] != "a" || got["email"] != "id@x" || got["name"] != "N" {
		t.Errorf("got %v: want the ID token's claims to win and userinfo to fill in", got)
	}
}

func TestMapRoles(t *testing.T) {
	mapping := map[string][]string{"idp-admins": {"template-admin", "owner"}, "idp-staff": {}, "idp-none": {""}}
	for _, tc := range []struct {
		claim, want, ignored []string
	}{
		{nil, []string{}, nil},
		{[]string{"idp-admins"}, []string{"owner", "template-admin"}, nil},
		{[]string{"idp-staff", "idp-none", "member"}, []string{}, nil},
		{[]string{"template-admin", "auditor"}, []string{"template-admin"}, []string{"auditor"}},
		{[]string{"template-admin", "idp-admins"}, []string{"owner", "template-admin"}, nil},
	} {
		got, ignored := mapRoles(tc.claim, mapping)
		if !slices.Equal(got, tc.want) || !slices.Equal(ignored, tc.ignored) {
			t.Errorf("mapRoles(%q): got %q (ignored %q), want %q (ignored %q)", tc.claim, got, ignored, tc.want, tc.ignored)
		}
	}
}

func TestClaimStrings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim any
		want  []string
		err   bool
	}{
		{"missing", nil, nil, false},
		{"one string", "devs", []string{"devs"}, false},
		{"empty string", "", nil, false},
		{"list", []any{"a", "b"}, []string{"a", "b"}, false},
		{"not strings", []any{"a", 1.0}, nil, true},
		{"number", 3.0, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := map[string]any{}
			if tc.claim != nil {
				claims["groups"] = tc.claim
			}
			got, err := claimStrings(claims, "groups")
			if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
				t.Errorf("got %q, %v; want %q (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}
