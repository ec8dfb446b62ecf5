package bench

import (
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
)

func TestZZTiming(t *testing.T) {
	s := time.Now()
	coderdtest.ClusterURL(t)
	t.Logf("cluster %s", time.Since(s))
	s = time.Now()
	f := newFleet(t)
	t.Logf("fleet %s", time.Since(s))
	s = time.Now()
	seedWorkspaces(t, f, 100, 7)
	t.Logf("seed %s", time.Since(s))
}
