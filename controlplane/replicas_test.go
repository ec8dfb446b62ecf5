package controlplane_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/controlplane"
)

// TestReplicasListEachOther runs two servers on one database: each lists
// both through GET /api/v2/replicas with its own listener as the relay
// address, and a replica that shuts down leaves the list at once.
func TestReplicasListEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := coderdtest.NewDatabase(t)
	dir := t.TempDir()
	cfg := func(name string) controlplane.Config {
		return controlplane.Config{PostgresURL: dbURL, ConfigDir: filepath.Join(dir, name), ReplicaHeartbeatInterval: time.Second}
	}
	anonA, _ := runServer(t, cfg("a"))
	anonB, stopB := runServer(t, cfg("b"))
	a, _ := coderdtest.CreateFirstUser(t, anonA)
	b := login(t, anonB, "admin@example.com")
	addresses := func(c *codersdk.Client) []string {
		t.Helper()
		rs, err := c.Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rs {
			if r.Version != "v1.2.3-test" || r.Hostname == "" || r.LastHeartbeatAt.Before(r.CreatedAt) {
				t.Errorf("replica %+v", r)
			}
			out = append(out, r.RelayAddress)
		}
		return out
	}
	for _, c := range []*codersdk.Client{a, b} {
		got := addresses(c)
		if len(got) != 2 || got[0] != a.URL.String() || got[1] != b.URL.String() {
			t.Errorf("replicas seen through %s: %q, want [%s %s]", c.URL, got, a.URL, b.URL)
		}
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if got := addresses(a); len(got) != 1 || got[0] != a.URL.String() {
		t.Errorf("after b shut down: %q, want only %s", got, a.URL)
	}
}
