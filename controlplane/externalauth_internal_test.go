package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"airgapcoder/certs"
	"airgapcoder/coderd/externalauth"
	"airgapcoder/internal/egress"
)

// TestExternalAuthFromEnv: CODER_EXTERNAL_AUTH_<n>_<FIELD> as Coder reads
// it (numbered from 0, lists split at spaces), with the errors naming the
// variable for a gap, an unknown field, a bad number or value, Coder's
// unsupported fields and its old CODER_GITAUTH_ names.
func TestExternalAuthFromEnv(t *testing.T) {
	gitea := ExternalAuthProvider{Config: externalauth.Config{
		ID: "corp-git", Type: "gitea", ClientID: "cid", ClientSecret: "cs",
		AuthURL: "https://git.corp.example/login/oauth/authorize", TokenURL: "https://git.corp.example/login/oauth/access_token",
		ValidateURL: "https://git.corp.example/api/v1/user", Regex: `^https://git\.corp\.example/`,
		Scopes: []string{"read:user", "write:repository"}, DisplayName: "Corp Git", DisplayIcon: "/icon/gitea.svg",
		NoRefresh: true, ExtraTokenKeys: []string{"scope", "token_type"},
	}}
	for _, tc := range []struct {
		name    string
		env     []string
		want    []ExternalAuthProvider
		wantErr string
	}{
		{name: "none", env: []string{"CODER_ACCESS_URL=https://coder.example", "HOME=/root"}},
		{name: "every field", env: []string{
			"CODER_EXTERNAL_AUTH_0_ID=corp-git", "CODER_EXTERNAL_AUTH_0_TYPE=gitea", "CODER_EXTERNAL_AUTH_0_CLIENT_ID=cid",
			"CODER_EXTERNAL_AUTH_0_CLIENT_SECRET=cs", "CODER_EXTERNAL_AUTH_0_AUTH_URL=https://git.corp.example/login/oauth/authorize",
			"CODER_EXTERNAL_AUTH_0_TOKEN_URL=https://git.corp.example/login/oauth/access_token",
			"CODER_EXTERNAL_AUTH_0_VALIDATE_URL=https://git.corp.example/api/v1/user", `CODER_EXTERNAL_AUTH_0_REGEX=^https://git\.corp\.example/`,
			"CODER_EXTERNAL_AUTH_0_SCOPES=read:user  write:repository", "CODER_EXTERNAL_AUTH_0_DISPLAY_NAME=Corp Git",
			"CODER_EXTERNAL_AUTH_0_DISPLAY_ICON=/icon/gitea.svg", "CODER_EXTERNAL_AUTH_0_NO_REFRESH=true",
			"CODER_EXTERNAL_AUTH_0_EXTRA_TOKEN_KEYS=scope token_type",
		}, want: []ExternalAuthProvider{gitea}},
		{name: "two, any order, secret file", env: []string{
			"CODER_EXTERNAL_AUTH_1_TYPE=gitlab", "CODER_EXTERNAL_AUTH_0_TYPE=gitea", "CODER_EXTERNAL_AUTH_1_CLIENT_ID=b",
			"CODER_EXTERNAL_AUTH_0_CLIENT_ID=a", "CODER_EXTERNAL_AUTH_1_CLIENT_SECRET_FILE=/etc/coder/gitlab-secret",
		}, want: []ExternalAuthProvider{
			{Config: externalauth.Config{Type: "gitea", ClientID: "a"}},
			{Config: externalauth.Config{Type: "gitlab", ClientID: "b"}, ClientSecretFile: "/etc/coder/gitlab-secret"},
		}},
		{name: "the first of duplicates", env: []string{"CODER_EXTERNAL_AUTH_0_TYPE=gitea", "CODER_EXTERNAL_AUTH_0_TYPE=gitlab"},
			want: []ExternalAuthProvider{{Config: externalauth.Config{Type: "gitea"}}}},
		{name: "Coder's unsupported fields left off", env: []string{"CODER_EXTERNAL_AUTH_0_TYPE=gitea", "CODER_EXTERNAL_AUTH_0_DEVICE_FLOW=false", "CODER_EXTERNAL_AUTH_0_APP_INSTALL_URL="},
			want: []ExternalAuthProvider{{Config: externalauth.Config{Type: "gitea"}}}},
		{name: "gap", env: []string{"CODER_EXTERNAL_AUTH_0_TYPE=gitea", "CODER_EXTERNAL_AUTH_2_TYPE=gitlab", "CODER_EXTERNAL_AUTH_2_CLIENT_ID=x"},
			wantErr: "CODER_EXTERNAL_AUTH_2_CLIENT_ID: provider 2 skips provider 1"},
		{name: "no provider 0", env: []string{"CODER_EXTERNAL_AUTH_1_TYPE=gitea"}, wantErr: "CODER_EXTERNAL_AUTH_1_TYPE: provider 1 skips provider 0"},
		{name: "unknown field", env: []string{"CODER_EXTERNAL_AUTH_0_TYPE=gitea", "CODER_EXTERNAL_AUTH_0_CLIENTID=x"},
			wantErr: "CODER_EXTERNAL_AUTH_0_CLIENTID: unknown field CLIENTID; known fields: AUTH_URL, CLIENT_ID,"},
		{name: "no number", env: []string{"CODER_EXTERNAL_AUTH_ID=gitea"}, wantErr: "CODER_EXTERNAL_AUTH_ID: want CODER_EXTERNAL_AUTH_<n>_<FIELD>"},
		{name: "leading zero", env: []string{"CODER_EXTERNAL_AUTH_00_ID=gitea"}, wantErr: "CODER_EXTERNAL_AUTH_00_ID: want"},
		{name: "no field", env: []string{"CODER_EXTERNAL_AUTH_0=gitea"}, wantErr: "CODER_EXTERNAL_AUTH_0: want"},
		{name: "bad bool", env: []string{"CODER_EXTERNAL_AUTH_0_NO_REFRESH=maybe"}, wantErr: `CODER_EXTERNAL_AUTH_0_NO_REFRESH: "maybe" is not true or false`},
		{name: "device flow", env: []string{"CODER_EXTERNAL_AUTH_0_DEVICE_FLOW=true"}, wantErr: "CODER_EXTERNAL_AUTH_0_DEVICE_FLOW: the device flow is not supported"},
		{name: "old names", env: []string{"CODER_GITAUTH_0_ID=gitea"}, wantErr: "CODER_GITAUTH_0_ID: Coder's old git auth variables are not read; rename it to CODER_EXTERNAL_AUTH_0_ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExternalAuthFromEnv(tc.env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}

	// Numbers order providers as numbers (Coder sorts the names as text,
	// which puts 10 before 2).
	var env []string
	for n := 11; n >= 0; n-- {
		env = append(env, fmt.Sprintf("CODER_EXTERNAL_AUTH_%d_ID=p%d", n, n))
	}
	got, err := ExternalAuthFromEnv(env)
	if err != nil || len(got) != 12 {
		t.Fatalf("12 providers: got %d, %v", len(got), err)
	}
	for n, p := range got {
		if want := fmt.Sprintf("p%d", n); p.ID != want {
			t.Errorf("provider %d: got id %q, want %q", n, p.ID, want)
		}
	}
}

// TestValidateExternalAuth: what coder server refuses at start, each
// error naming the variable to fix.
func TestValidateExternalAuth(t *testing.T) {
	ok := func(id, typ string) ExternalAuthProvider {
		return ExternalAuthProvider{Config: externalauth.Config{ID: id, Type: typ, ClientID: "c"}}
	}
	with := func(p ExternalAuthProvider, f func(*ExternalAuthProvider)) ExternalAuthProvider { f(&p); return p }
	for _, tc := range []struct {
		name      string
		providers []ExternalAuthProvider
		want      string
	}{
		{"none", nil, ""},
		{"id defaults to type", []ExternalAuthProvider{ok("", "gitea"), ok("corp-gitlab", "gitlab")}, ""},
		{"no type or id", []ExternalAuthProvider{ok("", "")}, "CODER_EXTERNAL_AUTH_0_TYPE: set the provider's type"},
		{"bad id", []ExternalAuthProvider{ok("git/lab", "gitlab")}, `CODER_EXTERNAL_AUTH_0_ID: "git/lab" is not a valid provider id`},
		{"bad type as id", []ExternalAuthProvider{ok("", "bitbucket server")}, `CODER_EXTERNAL_AUTH_0_TYPE: "bitbucket server" is not a valid provider id`},
		{"same type twice", []ExternalAuthProvider{ok("", "gitea"), ok("", "gitea")}, `CODER_EXTERNAL_AUTH_1_ID: provider id "gitea" is already provider 0's`},
		{"no client id", []ExternalAuthProvider{with(ok("gitea", "gitea"), func(p *ExternalAuthProvider) { p.ClientID = "" })}, `CODER_EXTERNAL_AUTH_0_CLIENT_ID: provider "gitea" has no client id`},
		{"relative URL", []ExternalAuthProvider{with(ok("gitea", "gitea"), func(p *ExternalAuthProvider) { p.TokenURL = "/login/oauth/access_token" })}, "CODER_EXTERNAL_AUTH_0_TOKEN_URL"},
		{"derived from the auth URL", []ExternalAuthProvider{with(ok("corp.git", "gitea"), func(p *ExternalAuthProvider) { p.AuthURL = "https://git.corp.example/login/oauth/authorize" })}, ""},
		{"generic without URLs", []ExternalAuthProvider{ok("", "corp-oauth")}, `CODER_EXTERNAL_AUTH_0_AUTH_URL: provider "corp-oauth" of type "corp-oauth" needs it`},
		{"bad regex", []ExternalAuthProvider{with(ok("gitea", "gitea"), func(p *ExternalAuthProvider) { p.Regex = "git(" })}, "CODER_EXTERNAL_AUTH_0_REGEX: error parsing regexp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ExternalAuthConfig{Providers: tc.providers}.check()
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("got %q, want one line", err)
			}
		})
	}
	_, err := New(Config{HTTPAddress: "127.0.0.1:0", PostgresURL: "postgres://x", ExternalAuth: ExternalAuthConfig{Providers: []ExternalAuthProvider{ok("", "")}}})
	if err == nil || !strings.Contains(err.Error(), "CODER_EXTERNAL_AUTH_0_TYPE") {
		t.Errorf("New: got %v, want the providers checked", err)
	}
}

// TestExternalAuthSecretFile: a secret file wins over the secret, trimmed;
// a missing or empty one fails the start; no provider, no client.
func TestExternalAuthSecretFile(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("  from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := ExternalAuthProvider{Config: externalauth.Config{Type: "gitea", ClientID: "c", ClientSecret: "inline"}}
	fromFile := p
	fromFile.ClientSecretFile = secret
	got, client, err := ExternalAuthConfig{Providers: []ExternalAuthProvider{p, fromFile}}.coderd()
	if err != nil || len(got) != 2 || got[0].ClientSecret != "inline" || got[1].ClientSecret != "from-file" || client == nil {
		t.Fatalf("got %+v, %v, %v", got, client, err)
	}
	for file, want := range map[string]string{filepath.Join(dir, "missing"): "client secret file", empty: "is empty"} {
		fromFile.ClientSecretFile = file
		if _, _, err := (ExternalAuthConfig{Providers: []ExternalAuthProvider{fromFile}}).coderd(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error saying %q", file, err, want)
		}
	}
	if got, client, err := (ExternalAuthConfig{}).coderd(); got != nil || client != nil || err != nil {
		t.Errorf("no providers: got %v, %v, %v", got, client, err)
	}
}

// TestExternalAuthClientTrust: the client built for the providers trusts
// the appliance's trust store (system roots plus the site CA imported as
// `coder certs import` does) and nothing else, and dials through the
// egress guard, as the OIDC client (TestOIDCClientTrust).
func TestExternalAuthClientTrust(t *testing.T) {
	siteDir, applianceDir, otherDir := t.TempDir(), t.TempDir(), t.TempDir()
	// The site's Git server, with a certificate from the site's CA.
	if _, err := certs.Generate(siteDir, []string{"127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	serverCert, err := certs.LoadServerCertificate(siteDir)
	if err != nil {
		t.Fatal(err)
	}
	git := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"login":"dev"}`)) }))
	git.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}
	git.StartTLS()
	t.Cleanup(git.Close)
	// The appliance imports the site's CA; another store trusts an
	// unrelated CA only.
	if _, err := certs.Import(applianceDir, []string{filepath.Join(certs.CertsDir(siteDir), certs.CAFile)}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Generate(otherDir, []string{"127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	guard, err := egress.New(nil, nil) // loopback only, where the Git server is
	if err != nil {
		t.Fatal(err)
	}
	provider := []ExternalAuthProvider{{Config: externalauth.Config{Type: "gitea", ClientID: "c", ValidateURL: git.URL + "/api/v1/user"}}}
	get := func(trustFile, url string) error {
		t.Helper()
		_, client, err := ExternalAuthConfig{Providers: provider, TrustFile: trustFile, Egress: guard}.coderd()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.CloseIdleConnections)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	}
	if err := get(filepath.Join(certs.CertsDir(applianceDir), certs.TrustFile), provider[0].ValidateURL); err != nil {
		t.Errorf("with the site's CA imported: %v", err)
	}
	var unknown x509.UnknownAuthorityError
	for name, trustFile := range map[string]string{"the system's roots": "", "another CA": filepath.Join(certs.CertsDir(otherDir), certs.TrustFile)} {
		if err := get(trustFile, provider[0].ValidateURL); !errors.As(err, &unknown) {
			t.Errorf("with %s: got %v, want x509.UnknownAuthorityError", name, err)
		}
	}
	var refused *egress.RefusedError
	if err := get("", "https://git.corp.example/api/v1/user"); !errors.As(err, &refused) {
		t.Errorf("a host outside the allow list: got %v, want egress.RefusedError", err)
	}
}
