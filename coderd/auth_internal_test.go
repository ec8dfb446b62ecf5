package coderd

import (
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestDummyHashCost: the hash compared for an unknown email costs what a
// user's password hash costs, so the two answers take as long.
func TestDummyHashCost(t *testing.T) {
	cost, err := bcrypt.Cost(dummyHash)
	if err != nil || cost != bcrypt.DefaultCost {
		t.Fatalf("dummyHash cost %d (%v), want bcrypt.DefaultCost %d", cost, err, bcrypt.DefaultCost)
	}
	if bcrypt.CompareHashAndPassword(dummyHash, []byte("not a password")) != nil {
		t.Error("dummyHash is not a bcrypt hash of its documented password")
	}
}
