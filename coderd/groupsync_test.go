package coderd_test

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

func TestParseGroupSyncOptions(t *testing.T) {
	t.Parallel()
	o, err := coderd.ParseGroupSyncOptions(`{"idp":"coder"}`, true, `^team-`, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Mapping["idp"] != "coder" || !o.AutoCreate || o.RegexFilter.String() != "^team-" || !slices.Equal(o.AllowedGroups, []string{"a"}) {
		t.Errorf("options: got %+v", o)
	}
	for _, tc := range []struct{ mapping, regex, flag string }{
		{`["x"]`, "", "--oidc-group-mapping"},
		{``, "(", "--oidc-group-regex-filter"},
	} {
		if _, err := coderd.ParseGroupSyncOptions(tc.mapping, false, tc.regex, nil); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("mapping %q regex %q: got %v, want an error naming %s", tc.mapping, tc.regex, err, tc.flag)
		}
	}
}

func TestGroupSyncCheckAllowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		allowed, claim []string
		mapping        map[string]string
		ok             bool
	}{
		{nil, nil, nil, true},
		{nil, []string{"x"}, nil, true},
		{[]string{"coders"}, []string{"x", "coders"}, nil, true},
		{[]string{"coders"}, []string{"x"}, nil, false},
		{[]string{"coders"}, nil, nil, false},
		{[]string{"coders"}, []string{"Coders"}, nil, false}, // group names are compared exactly
		// As Coder's: the allowed list names groups after the mapping.
		{[]string{"coders"}, []string{"cn=dev,ou=corp"}, map[string]string{"cn=dev,ou=corp": "coders"}, true},
		{[]string{"cn=dev,ou=corp"}, []string{"cn=dev,ou=corp"}, map[string]string{"cn=dev,ou=corp": "coders"}, false},
	} {
		err := coderd.GroupSyncOptions{AllowedGroups: tc.allowed, Mapping: tc.mapping}.CheckAllowed(tc.claim)
		if (err == nil) != tc.ok {
			t.Errorf("allowed %v, claim %v: got %v, want ok=%v", tc.allowed, tc.claim, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "not in an allowed group") {
			t.Errorf("refusal %q does not say why", err)
		}
	}
}

func TestSyncOIDCGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	_, alice := d.CreateUser(t, owner, "alice")
	devs, err := owner.CreateGroup(ctx, "default", codersdk.CreateGroupRequest{Name: "devs"})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := owner.CreateGroup(ctx, "default", codersdk.CreateGroupRequest{Name: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	// Alice is in ops by an owner's hand: the sync never removes that.
	if _, err := owner.PatchGroup(ctx, ops.ID, codersdk.PatchGroupRequest{AddUsers: []string{"alice"}}); err != nil {
		t.Fatal(err)
	}
	origin := coderd.GroupSyncAudit{IP: "192.0.2.7", UserAgent: "test", Issuer: "https://idp.test", Subject: "sub-alice"}
	mapped := coderd.GroupSyncOptions{Mapping: map[string]string{"engineering": "devs"}}
	auto := coderd.GroupSyncOptions{AutoCreate: true, RegexFilter: regexp.MustCompile(`^team-`), Mapping: map[string]string{"idp-x": "team-b"}}
	steps := []struct {
		name           string
		claim          []string
		opts           coderd.GroupSyncOptions
		added, removed []string
		groups         []string // alice's groups after, Everyone aside
	}{
		{"mapping, unknown ignored", []string{"engineering", "ops", "unknown", "Everyone"}, mapped, []string{"devs"}, nil, []string{"devs", "ops"}},
		{"same claim again changes nothing", []string{"engineering", "ops"}, mapped, nil, nil, []string{"devs", "ops"}},
		{"left the IdP group", []string{"ops"}, mapped, nil, []string{"devs"}, []string{"ops"}},
		{"empty claim keeps manual memberships", nil, mapped, nil, nil, []string{"ops"}},
		{"auto-create after the filter", []string{"team-a", "other", "idp-x"}, auto, []string{"team-a", "team-b"}, nil, []string{"ops", "team-a", "team-b"}},
		{"auto-created groups stay, memberships go", []string{"team-a"}, auto, nil, []string{"team-b"}, []string{"ops", "team-a"}},
		{"the filter applies to existing groups too", []string{"team-a", "devs"}, auto, nil, nil, []string{"ops", "team-a"}},
		{"no auto-create: a missing group is ignored", []string{"team-a", "team-c"}, coderd.GroupSyncOptions{}, nil, nil, []string{"ops", "team-a"}},
	}
	for _, s := range steps {
		added, removed, err := coderd.SyncOIDCGroups(d.API, ctx, alice.ID, s.claim, s.opts, origin)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !slices.Equal(added, s.added) || !slices.Equal(removed, s.removed) {
			t.Errorf("%s: got added %v removed %v, want %v and %v", s.name, added, removed, s.added, s.removed)
		}
		gs, err := owner.Groups(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		var in []string
		for _, g := range gs {
			if !g.IsEveryone() && slices.Contains(memberNames(g), "alice") {
				in = append(in, g.Name)
			}
		}
		if !slices.Equal(in, s.groups) {
			t.Errorf("%s: alice is in %v, want %v", s.name, in, s.groups)
		}
	}
	gs, err := owner.Groups(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]codersdk.GroupSource{}
	for _, g := range gs {
		sources[g.Name] = g.Source
	}
	if want := map[string]codersdk.GroupSource{"Everyone": "user", "devs": "user", "ops": "user", "team-a": "oidc", "team-b": "oidc"}; !mapsEqual(sources, want) {
		t.Errorf("groups and sources: got %v, want %v (no group for 'unknown', 'other' or 'team-c')", sources, want)
	}
	_ = devs

	// Audited, with the IdP subject.
	logs, err := owner.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "resource_type:group username:alice", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range logs.AuditLogs {
		var f map[string]any
		_ = json.Unmarshal(l.AdditionalFields, &f)
		if f["idp_subject"] != "sub-alice" || f["source"] != "oidc_group_sync" || l.IP != "192.0.2.7" {
			t.Errorf("sync record %s %s: fields %v ip %q", l.Action, l.ResourceTarget, f, l.IP)
		}
		what := string(l.Action) + " " + l.ResourceTarget
		if _, ok := f["added_users"]; ok {
			what += " +alice"
		}
		if _, ok := f["removed_users"]; ok {
			what += " -alice"
		}
		got = append(got, what)
	}
	slices.Sort(got)
	want := []string{"create team-a", "create team-b", "write devs +alice", "write devs -alice", "write team-a +alice", "write team-b +alice", "write team-b -alice"}
	if !slices.Equal(got, want) {
		t.Errorf("sync audit records: got %v, want %v", got, want)
	}
}

func mapsEqual[K, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
