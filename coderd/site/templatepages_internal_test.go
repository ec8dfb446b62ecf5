package site

import "testing"

func TestTemplatePath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, name, version string
		ok                  bool
	}{
		{"/templates/process", "process", "", true},
		{"/templates/process/versions/keen_ternly", "process", "keen_ternly", true},
		{"/templates/", "", "", false},
		{"/templates/process/", "", "", false},
		{"/templates/process/versions", "", "", false},
		{"/templates/process/other/v1", "", "", false},
		{"/templates/../admin", "", "", false},
		{"/templates/process/versions/..", "", "", false},
		{"/templatesx/process", "", "", false},
	} {
		name, version, ok := templatePath(tc.path)
		if name != tc.name || version != tc.version || ok != tc.ok {
			t.Errorf("templatePath(%q) = %q, %q, %v; want %q, %q, %v", tc.path, name, version, ok, tc.name, tc.version, tc.ok)
		}
	}
}

func TestTagsMatch(t *testing.T) {
	t.Parallel()
	org := map[string]string{"scope": "organization"}
	for _, tc := range []struct {
		name        string
		job, daemon map[string]string
		want        bool
	}{
		{"untagged job, untagged daemon", org, org, true},
		{"no tags at all", nil, nil, true},
		{"untagged job, tagged daemon", org, map[string]string{"scope": "organization", "os": "linux"}, true},
		{"tagged job, untagged daemon", map[string]string{"scope": "organization", "os": "linux"}, org, false},
		{"tagged job, other value", map[string]string{"os": "linux"}, map[string]string{"os": "windows"}, false},
		{"user job, its owner's daemon", map[string]string{"scope": "user", "owner": "u1"}, map[string]string{"scope": "user", "owner": "u1"}, true},
		{"user job, another user's daemon", map[string]string{"scope": "user", "owner": "u1"}, map[string]string{"scope": "user", "owner": "u2"}, false},
		{"org job, user daemon", org, map[string]string{"scope": "user", "owner": "u1"}, false},
	} {
		if got := tagsMatch(tc.job, tc.daemon); got != tc.want {
			t.Errorf("%s: tagsMatch(%v, %v) = %v, want %v", tc.name, tc.job, tc.daemon, got, tc.want)
		}
	}
}
