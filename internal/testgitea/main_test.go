package testgitea_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: a Gitea
// process waiter or client connection that cleanup did not end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
