package provider

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func TestReadEnv(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	cp := newFakeControlPlane(t, 0, false)
	os.WriteFile(caFile, []byte("comment line\n"+cp.CAPEM+"trailing\n"), 0o644)
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o644)

	tests := []struct {
		name      string
		env       map[string]string
		configURL string
		check     func(t *testing.T, e *buildEnv)
		wantErr   string
	}{
		{
			name: "defaults",
			check: func(t *testing.T, e *buildEnv) {
				want := &buildEnv{
					URL: DefaultURL, URLDefaulted: true,
					WorkspaceID: nilUUID, WorkspaceName: "default", WorkspaceOwner: "default", WorkspaceOwnerID: nilUUID,
					Transition: "start", TemplateName: "default",
					ProvisionerOS: runtime.GOOS, ProvisionerArch: runtime.GOARCH, ProvisionerTags: map[string]string{},
				}
				if !reflect.DeepEqual(e, want) {
					t.Errorf("got %+v, want %+v", e, want)
				}
			},
		},
		{
			name: "everything set",
			env: map[string]string{
				EnvURL: "https://coder.example.test/", EnvWorkspaceTransition: "stop",
				EnvProvisionerTags: `{"scope":"organization","owner":""}`, EnvCACertFile: caFile,
			},
			check: func(t *testing.T, e *buildEnv) {
				if e.URL != "https://coder.example.test" || e.URLDefaulted {
					t.Errorf("URL: got %q (defaulted %v), want https://coder.example.test", e.URL, e.URLDefaulted)
				}
				if e.Transition != "stop" {
					t.Errorf("transition: got %q, want stop", e.Transition)
				}
				if want := map[string]string{"scope": "organization", "owner": ""}; !reflect.DeepEqual(e.ProvisionerTags, want) {
					t.Errorf("tags: got %v, want %v", e.ProvisionerTags, want)
				}
				if e.CAPEM != cp.CAPEM {
					t.Errorf("CA PEM: got %q, want only the certificate %q", e.CAPEM, cp.CAPEM)
				}
			},
		},
		{
			name:      "provider url overrides CODER_URL",
			env:       map[string]string{EnvURL: "https://env.example.test"},
			configURL: "https://config.example.test:8443/coder/",
			check: func(t *testing.T, e *buildEnv) {
				if e.URL != "https://config.example.test:8443/coder" {
					t.Errorf("URL: got %q", e.URL)
				}
			},
		},
		{name: "bad transition", env: map[string]string{EnvWorkspaceTransition: "restart"}, wantErr: EnvWorkspaceTransition},
		{name: "tags not JSON", env: map[string]string{EnvProvisionerTags: "scope=user"}, wantErr: EnvProvisionerTags},
		{name: "tags not strings", env: map[string]string{EnvProvisionerTags: `{"n":1}`}, wantErr: EnvProvisionerTags},
		{name: "CA file missing", env: map[string]string{EnvCACertFile: filepath.Join(dir, "nope")}, wantErr: EnvCACertFile},
		{name: "CA file without PEM", env: map[string]string{EnvCACertFile: notPEM}, wantErr: "no PEM certificate"},
		{name: "URL without scheme", env: map[string]string{EnvURL: "coder.example.test"}, wantErr: EnvURL},
		{name: "URL with query", configURL: "https://x.test/?a=b", wantErr: "provider url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			e, err := readEnv(lookup, tt.configURL)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, e)
		})
	}
}
