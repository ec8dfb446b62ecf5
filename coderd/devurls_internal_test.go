package coderd

import "testing"

func TestParseDevURL(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
		want devURL
	}{
		{"/@alice/dev/apps/web/x/y", true, devURL{owner: "alice", workspace: "dev", kind: "apps", target: "web", prefix: "/@alice/dev/apps/web", rest: "/x/y"}},
		{"/@alice/dev.main/ports/8080/", true, devURL{owner: "alice", workspace: "dev", agent: "main", kind: "ports", target: "8080", prefix: "/@alice/dev.main/ports/8080", rest: "/"}},
		{"/@alice/dev/apps/web", true, devURL{owner: "alice", workspace: "dev", kind: "apps", target: "web", prefix: "/@alice/dev/apps/web"}},
		{"/@alice/dev/ports/80/a%2Fb", true, devURL{owner: "alice", workspace: "dev", kind: "ports", target: "80", prefix: "/@alice/dev/ports/80", rest: "/a%2Fb"}},
		{"/@alice/dev/files/x/", false, devURL{}},
		{"/@alice/dev", false, devURL{}},
		{"/@/dev/apps/web/", false, devURL{}},
		{"/@alice/dev/apps/%zz/", false, devURL{}},
	} {
		got, ok := parseDevURL(tc.path)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseDevURL(%q) = %+v, %v; want %+v, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRelayAddr(t *testing.T) {
	for _, host := range []string{"", "localhost", "10.0.0.1", "::1", "db.internal"} {
		addr := relayAddr("3f1c6f1e-5a87-4f66-9d2c-1b2f8d3f5a10", host, 5432)
		id, gotHost, port, err := parseRelayAddr(addr)
		if err != nil || id != "3f1c6f1e-5a87-4f66-9d2c-1b2f8d3f5a10" || gotHost != host || port != 5432 {
			t.Errorf("round trip of %q via %q: %q %q %d %v", host, addr, id, gotHost, port, err)
		}
	}
	if _, _, _, err := parseRelayAddr("example.com:80"); err == nil {
		t.Error("a non-relay address parsed")
	}
}
