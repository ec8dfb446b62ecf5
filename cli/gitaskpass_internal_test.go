package cli

import (
	"testing"

	"airgapcoder/codersdk"
)

func TestParseAskpassPrompt(t *testing.T) {
	for _, tc := range []struct {
		prompt  string
		want    askpassPrompt
		wantErr bool
	}{
		{prompt: "Username for 'https://github.com': ", want: askpassPrompt{URL: "https://github.com"}},
		{prompt: "Username for 'https://enterprise.github.com': ", want: askpassPrompt{URL: "https://enterprise.github.com"}},
		{prompt: "Username for 'http://wow.io': ", want: askpassPrompt{URL: "http://wow.io"}},
		{prompt: "Username for 'https://git.example:3000': ", want: askpassPrompt{URL: "https://git.example:3000"}},
		{prompt: "Password for 'https://myuser@github.com': ", want: askpassPrompt{Password: true, User: "myuser", URL: "https://github.com"}},
		{prompt: "Password for 'http://myuser@wow.io': ", want: askpassPrompt{Password: true, User: "myuser", URL: "http://wow.io"}},
		{prompt: "Password for 'https://user@host': ", want: askpassPrompt{Password: true, User: "user", URL: "https://host"}},
		// A token as the user name, as git puts it back in the password prompt.
		{prompt: "Password for 'https://gta_0123abcd@127.0.0.1:3443': ", want: askpassPrompt{Password: true, User: "gta_0123abcd", URL: "https://127.0.0.1:3443"}},
		// credential.useHttpPath: the path is part of the URL.
		{prompt: "Username for 'https://git.example/org/repo.git': ", want: askpassPrompt{URL: "https://git.example/org/repo.git"}},
		// Double quotes, and no trailing space.
		{prompt: `Username for "https://git.example":`, want: askpassPrompt{URL: "https://git.example"}},
		{prompt: "Username for 'ssh://git.example': ", wantErr: true},
		{prompt: "Username for 'https://': ", wantErr: true},
		{prompt: "Enter passphrase for key '/home/coder/.ssh/id_ed25519': ", wantErr: true},
		{prompt: "Username: ", wantErr: true},
		{prompt: "", wantErr: true},
	} {
		t.Run(tc.prompt, func(t *testing.T) {
			got, err := parseAskpassPrompt(tc.prompt)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestIsGitAskpassRun(t *testing.T) {
	gitEnv := []string{"PATH=/usr/bin", "GIT_PREFIX="}
	for _, tc := range []struct {
		name    string
		args    []string
		environ []string
		want    bool
	}{
		{"username prompt from git", []string{"Username for 'https://git.example': "}, gitEnv, true},
		{"password prompt from git", []string{"Password for 'https://u@git.example': "}, gitEnv, true},
		{"not run by git", []string{"Username for 'https://git.example': "}, []string{"PATH=/usr/bin"}, false},
		{"a command", []string{"version"}, gitEnv, false},
		{"two arguments", []string{"Username", "for"}, gitEnv, false},
		{"no arguments", nil, gitEnv, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isGitAskpassRun(tc.args, tc.environ); got != tc.want {
				t.Errorf("isGitAskpassRun(%q): got %v, want %v", tc.args, got, tc.want)
			}
		})
	}
}

func TestAskpassAnswer(t *testing.T) {
	oauth2 := codersdk.ExternalAuthResponse{AccessToken: "tok", Username: "oauth2", Password: "tok"}
	tokenAsUser := codersdk.ExternalAuthResponse{AccessToken: "tok", Username: "tok"}
	onlyToken := codersdk.ExternalAuthResponse{AccessToken: "tok"}
	for _, tc := range []struct {
		name     string
		password bool
		resp     codersdk.ExternalAuthResponse
		want     string
	}{
		{"user name, oauth2 convention", false, oauth2, "oauth2"},
		{"password, oauth2 convention", true, oauth2, "tok"},
		{"user name, token as user", false, tokenAsUser, "tok"},
		{"password, token as user", true, tokenAsUser, "tok"},
		{"user name, token only", false, onlyToken, "tok"},
		{"password, token only", true, onlyToken, "tok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (askpassPrompt{Password: tc.password}).answer(tc.resp); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestProviderName(t *testing.T) {
	for _, tc := range []struct {
		resp codersdk.ExternalAuthResponse
		want string
	}{
		{codersdk.ExternalAuthResponse{URL: "https://coder.example/external-auth/gitea", Type: "gitea"}, "gitea"},
		{codersdk.ExternalAuthResponse{URL: "https://coder.example/external-auth/my%20git/callback"}, "my git"},
		{codersdk.ExternalAuthResponse{URL: "https://coder.example/somewhere", Type: "gitlab"}, "gitlab"},
		{codersdk.ExternalAuthResponse{URL: "https://coder.example/somewhere"}, "the Git provider"},
	} {
		if got := providerName(tc.resp); got != tc.want {
			t.Errorf("providerName(%+v): got %q, want %q", tc.resp, got, tc.want)
		}
	}
}

func TestLookupExtra(t *testing.T) {
	extra := map[string]any{
		"authed_user": map[string]any{"id": "U123", "scopes": []any{"a", "b"}},
		"team":        map[string]any{"n": 3.0},
		"null":        nil,
	}
	for _, tc := range []struct {
		path   string
		want   string
		wantOK bool
	}{
		{"authed_user.id", "U123", true},
		{"authed_user.scopes.1", "b", true},
		{"authed_user.scopes", `["a","b"]`, true},
		{"team", `{"n":3}`, true},
		{"team.n", "3", true},
		{"null", "", true},
		{"authed_user.missing", "", false},
		{"authed_user.scopes.9", "", false},
		{"authed_user.id.deeper", "", false},
	} {
		got, ok := lookupExtra(extra, tc.path)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("lookupExtra(%q): got %q, %v; want %q, %v", tc.path, got, ok, tc.want, tc.wantOK)
		}
	}
}
