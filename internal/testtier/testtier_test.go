package testtier_test

import (
	"testing"

	"airgapcoder/internal/testtier"
)

// TestHeavy: under -short the test stops at Heavy, skipped with the shared
// reason; without -short it runs on.
func TestHeavy(t *testing.T) {
	var ran bool
	t.Run("inner", func(t *testing.T) {
		testtier.Heavy(t, "starts nothing")
		ran = true
	})
	if got, want := ran, !testing.Short(); got != want {
		t.Errorf("ran past Heavy = %v, want %v (-short %v)", got, want, testing.Short())
	}
}
