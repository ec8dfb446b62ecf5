package wsproxy

import "testing"

func TestDevPath(t *testing.T) {
	for _, tc := range []struct {
		in, prefix, rest string
		hasRest, ok      bool
	}{
		{in: "/@alice/dev/apps/web/", prefix: "/@alice/dev/apps/web", rest: "/", hasRest: true, ok: true},
		{in: "/@alice/dev.main/ports/8080/a%2Fb/c", prefix: "/@alice/dev.main/ports/8080", rest: "/a%2Fb/c", hasRest: true, ok: true},
		{in: "/@alice/dev/apps/web", prefix: "/@alice/dev/apps/web", ok: true},
		{in: "/@alice/dev/", ok: false},
		{in: "/@alice/dev/files/x/", ok: false},
		{in: "/@/dev/apps/web/", ok: false},
		{in: "/@alice/dev/apps//x", ok: false},
	} {
		prefix, rest, hasRest, ok := devPath(tc.in)
		if prefix != tc.prefix || rest != tc.rest || hasRest != tc.hasRest || ok != tc.ok {
			t.Errorf("devPath(%q): got %q, %q, %v, %v, want %q, %q, %v, %v", tc.in, prefix, rest, hasRest, ok, tc.prefix, tc.rest, tc.hasRest, tc.ok)
		}
	}
}

func TestAppHost(t *testing.T) {
	for _, tc := range []struct {
		wildcard, host string
		want           bool
	}{
		{"*.eu.example", "web--main--dev--alice.eu.example", true},
		{"*.eu.example:8443", "web--main--dev--alice.eu.example", true},
		{"*-eu.example", "web--main--dev--alice-eu.example", true},
		{"*.eu.example", "eu.example", false},
		{"*.eu.example", "a.b.eu.example", false},
		{"*.eu.example", "web.eu.example.evil", false},
		{"*-eu.example", "-eu.example", false},
	} {
		suffix := wildcardSuffix(tc.wildcard)
		if got := isAppHost(hostName(tc.host), suffix); got != tc.want {
			t.Errorf("isAppHost(%q) under %q: got %v, want %v", tc.host, tc.wildcard, got, tc.want)
		}
	}
	if got := wildcardSuffix(""); got != "" {
		t.Errorf("wildcardSuffix(\"\"): got %q, want none", got)
	}
}
