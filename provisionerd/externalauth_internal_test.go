package provisionerd

import (
	"reflect"
	"testing"

	"airgapcoder/codersdk"
)

func TestExternalAuthTokenEnv(t *testing.T) {
	got := externalAuthTokenEnv([]codersdk.ExternalAuthProviderToken{
		{ID: "gitea", AccessToken: "t1"},
		{ID: "corp-git.v2", AccessToken: "t2"},
		{ID: "", AccessToken: "no id"},
		{ID: "a=b", AccessToken: "not a name"},
	})
	want := map[string]string{
		"CODER_EXTERNAL_AUTH_ACCESS_TOKEN_gitea":       "t1",
		"CODER_EXTERNAL_AUTH_ACCESS_TOKEN_corp-git.v2": "t2",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
