package coderd_test

import (
	"context"
	"crypto/ed25519"
	"net/http"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

func TestBuildJobContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk"})
	admin, _ := d.CreateFirstUser(t)
	alice, err := admin.CreateUser(ctx, codersdk.CreateUserRequest{
		Email: "alice@example.com", Username: "alice", Name: "Alice Liddell", Password: coderdtest.FirstUserPassword,
		Roles: []string{codersdk.RoleTemplateAdmin},
	})
	if err != nil {
		t.Fatal(err)
	}
	if alice.Name != "Alice Liddell" {
		t.Errorf("created user's name: got %q, want Alice Liddell", alice.Name)
	}
	aliceClient := d.Client()
	login, err := aliceClient.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "alice@example.com", Password: coderdtest.FirstUserPassword})
	if err != nil {
		t.Fatal(err)
	}
	aliceClient.SessionToken = login.SessionToken
	daemon := d.NewDaemon(t, "ctx", nil)

	// The version's variables: one given at creation, one left to its
	// default, one sensitive.
	given := []codersdk.VariableValue{{Name: "region", Value: "us-east"}, {Name: "api_key", Value: "s3cr3t"}}
	tpl, imp := coderdtest.ImportTemplate(t, admin, daemon, "ctx", codersdk.CreateTemplateVersionRequest{Name: "v-one", UserVariableValues: given},
		codersdk.CompleteJobRequest{
			Parameters: []codersdk.TemplateVersionParameter{{Name: "size", Type: codersdk.ParameterTypeString, DefaultValue: "s", Mutable: true}},
			Variables: []codersdk.TemplateVersionVariable{
				{Name: "region", Type: "string", DefaultValue: "eu-west"},
				{Name: "image", Type: "string", DefaultValue: "ubuntu"},
				{Name: "api_key", Type: "string", Required: true, Sensitive: true},
			},
		})
	if !slices.Equal(imp.VariableValues, given) || imp.TemplateVersionName != "v-one" {
		t.Errorf("import job: got variables %v and version name %q, want %v and v-one", imp.VariableValues, imp.TemplateVersionName, given)
	}

	t.Run("template version variables", func(t *testing.T) {
		v, err := admin.TemplateVersion(ctx, tpl.ActiveVersionID)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"region": "us-east", "image": "ubuntu", "api_key": ""}
		if len(v.Variables) != len(want) {
			t.Fatalf("variables: got %+v, want %d", v.Variables, len(want))
		}
		for _, tv := range v.Variables {
			if tv.Value != want[tv.Name] {
				t.Errorf("variable %s: got value %q, want %q", tv.Name, tv.Value, want[tv.Name])
			}
			if tv.Name == "api_key" && (!tv.Sensitive || tv.DefaultValue != "") {
				t.Errorf("sensitive variable: got %+v, want it flagged and blanked", tv)
			}
		}
	})

	w, err := aliceClient.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	j := daemon.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`)})

	t.Run("template and variables", func(t *testing.T) {
		if j.TemplateID != tpl.ID || j.TemplateName != "ctx" || j.TemplateVersionName != "v-one" {
			t.Errorf("template: got id %s name %s version %s, want %s ctx v-one", j.TemplateID, j.TemplateName, j.TemplateVersionName, tpl.ID)
		}
		got := map[string]string{}
		for _, v := range j.VariableValues {
			got[v.Name] = v.Value
		}
		for name, want := range map[string]string{"region": "us-east", "image": "ubuntu", "api_key": "s3cr3t"} {
			if got[name] != want {
				t.Errorf("build's variable %s: got %q, want %q", name, got[name], want)
			}
		}
	})
	t.Run("owner", func(t *testing.T) {
		o := j.Owner
		if o.FullName != "Alice Liddell" || o.Email != "alice@example.com" || o.LoginType != "password" || len(o.Groups) != 0 {
			t.Errorf("owner: got %+v, want Alice Liddell <alice@example.com>, password login, no groups", o)
		}
		if !slices.Contains(o.Roles, codersdk.RoleMember) || !slices.Contains(o.Roles, codersdk.RoleTemplateAdmin) {
			t.Errorf("owner's roles: got %v, want member and template-admin", o.Roles)
		}
	})
	t.Run("ssh key", func(t *testing.T) {
		key, err := aliceClient.GitSSHKey(ctx, codersdk.Me)
		if err != nil {
			t.Fatal(err)
		}
		if j.Owner.SSHPublicKey != key.PublicKey || !strings.HasPrefix(key.PublicKey, "ssh-ed25519 ") {
			t.Errorf("public key: got %q in the job and %q from the API, want the same ssh-ed25519 key", j.Owner.SSHPublicKey, key.PublicKey)
		}
		priv, err := ssh.ParseRawPrivateKey([]byte(j.Owner.SSHPrivateKey))
		if err != nil {
			t.Fatalf("parse the job's private key: %v", err)
		}
		signer, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := priv.(*ed25519.PrivateKey); !ok {
			t.Errorf("private key: got %T, want ed25519", priv)
		}
		if got := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))); got != key.PublicKey {
			t.Errorf("private key's public half: got %q, want %q", got, key.PublicKey)
		}
		// Another user has a key of its own.
		other, err := admin.GitSSHKey(ctx, codersdk.Me)
		if err != nil || other.PublicKey == key.PublicKey {
			t.Errorf("admin's key: got %q (%v), want a different key", other.PublicKey, err)
		}
	})

	firstToken := j.Owner.SessionToken
	t.Run("session token works", func(t *testing.T) {
		c := d.Client()
		c.SessionToken = firstToken
		me, err := c.User(ctx, codersdk.Me)
		if err != nil {
			t.Fatalf("use the build's session token: %v", err)
		}
		if me.Username != "alice" {
			t.Errorf("token's user: got %s, want alice", me.Username)
		}
		tokens, err := aliceClient.Tokens(ctx, codersdk.Me)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range tokens {
			if strings.Contains(tok.TokenName, "dev") {
				t.Errorf("tokens list: got the workspace's session token %q, want it hidden as Coder does", tok.TokenName)
			}
		}
	})
	t.Run("next start replaces the token, stop revokes it", func(t *testing.T) {
		if _, err := aliceClient.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart}); err != nil {
			t.Fatal(err)
		}
		j2 := daemon.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`)})
		if j2.Owner.SessionToken == "" || j2.Owner.SessionToken == firstToken {
			t.Fatalf("second build's token: got %q, want a new one", j2.Owner.SessionToken)
		}
		old, fresh := d.Client(), d.Client()
		old.SessionToken, fresh.SessionToken = firstToken, j2.Owner.SessionToken
		if _, err := old.User(ctx, codersdk.Me); !codersdk.IsStatus(err, http.StatusUnauthorized) {
			t.Errorf("first build's token after the second build: got %v, want 401", err)
		}
		if _, err := fresh.User(ctx, codersdk.Me); err != nil {
			t.Errorf("second build's token: %v", err)
		}
		if _, err := aliceClient.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err != nil {
			t.Fatal(err)
		}
		j3 := daemon.CompleteNext(t, codersdk.CompleteJobRequest{State: []byte(`{}`)})
		if j3.Owner.SessionToken != "" {
			t.Errorf("stop build's token: got %q, want none", j3.Owner.SessionToken)
		}
		if _, err := fresh.User(ctx, codersdk.Me); !codersdk.IsStatus(err, http.StatusUnauthorized) {
			t.Errorf("start build's token after a stop: got %v, want 401", err)
		}
		if got, _ := valueOf(j3.PreviousParameterValues, "size"); got != "s" {
			t.Errorf("stop build's previous size: got %q, want s", got)
		}
	})

	t.Run("required variable without value fails the import", func(t *testing.T) {
		v := coderdtest.UploadVersionRequest(t, admin, coderdtest.MinimalTemplate, codersdk.CreateTemplateVersionRequest{})
		daemon.CompleteNext(t, codersdk.CompleteJobRequest{Variables: []codersdk.TemplateVersionVariable{{Name: "api_key", Type: "string", Required: true}}})
		v, err := admin.TemplateVersion(ctx, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if v.Job.Status != codersdk.ProvisionerJobFailed || !strings.Contains(v.Job.Error, "api_key") {
			t.Errorf("import: got %s %q, want failed naming api_key", v.Job.Status, v.Job.Error)
		}
	})
}

func TestUserNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{})
	c := d.Client()
	if _, err := c.CreateFirstUser(ctx, codersdk.CreateFirstUserRequest{Email: "admin@example.com", Username: "admin", Password: coderdtest.FirstUserPassword, Name: "Ada Admin"}); err != nil {
		t.Fatal(err)
	}
	login, err := c.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "admin@example.com", Password: coderdtest.FirstUserPassword})
	if err != nil {
		t.Fatal(err)
	}
	c.SessionToken = login.SessionToken
	me, err := c.User(ctx, codersdk.Me)
	if err != nil || me.Name != "Ada Admin" {
		t.Fatalf("first user: got name %q (%v), want Ada Admin", me.Name, err)
	}
	bob, bobUser := d.CreateUser(t, c, "bob")
	if bobUser.Name != "" {
		t.Errorf("user created without a name: got %q, want empty", bobUser.Name)
	}
	u, err := bob.UpdateUserProfile(ctx, codersdk.Me, codersdk.UpdateUserProfileRequest{Name: "Bob Builder"})
	if err != nil || u.Name != "Bob Builder" || u.Username != "bob" {
		t.Errorf("bob renames himself: got %+v (%v), want name Bob Builder, username bob", u, err)
	}
	if _, err := bob.UpdateUserProfile(ctx, me.ID, codersdk.UpdateUserProfileRequest{Name: "Hacked"}); err == nil {
		t.Error("bob renames the admin: got no error, want a refusal")
	}
	if _, err := c.UpdateUserProfile(ctx, "bob", codersdk.UpdateUserProfileRequest{Name: " padded "}); !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("name with surrounding spaces: got %v, want 400", err)
	}
	if _, err := c.CreateUser(ctx, codersdk.CreateUserRequest{Email: "long@example.com", Username: "long", Password: coderdtest.FirstUserPassword,
		Name: strings.Repeat("x", 129)}); !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("129-character name: got %v, want 400", err)
	}
	all, err := c.Users(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range all.Users {
		if u.Username == "bob" && u.Name != "Bob Builder" {
			t.Errorf("users list: got bob's name %q, want Bob Builder", u.Name)
		}
	}
}
