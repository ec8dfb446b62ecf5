package database_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// Replicas starting together create a deployment value at the same moment:
// every one of them gets the one value that was stored, none an error.
func TestDeploymentValueConcurrentCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openQueryDB(t)
	for round := range 20 {
		key := fmt.Sprintf("race-%d", round)
		got := make([]string, 8)
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() { got[i], errs[i] = db.DeploymentValue(ctx, key, fmt.Sprintf("value-%d", i)) })
		}
		wg.Wait()
		for i := range got {
			if errs[i] != nil {
				t.Fatalf("round %d, caller %d: %v", round, i, errs[i])
			}
			if got[i] != got[0] {
				t.Fatalf("round %d: callers got %q and %q", round, got[0], got[i])
			}
		}
	}
}
