// Package testtier splits the tests into two tiers: the fast one that
// `make test-fast` runs (`go test -short ./...`: unit tests and parsers) and
// the full one that `make test` and CI run. A test, or a shared test helper,
// that needs something heavy (PostgreSQL, a built binary, a browser,
// HAProxy, terraform, Hydra, Gitea, network namespaces) or simply takes
// seconds calls Heavy first, so that -short skips it with a reason that
// reads the same everywhere. It only skips: it never changes what a test
// does when it runs, and without -short nothing is skipped.
package testtier

import "testing"

// Heavy skips t under -short, saying why, e.g.
//
//	testtier.Heavy(t, "starts PostgreSQL")
//
// reports "-short: starts PostgreSQL; make test runs it". Without -short it
// does nothing. Call it from the test's goroutine (t.Skip ends it), before
// the test or helper starts anything.
func Heavy(t testing.TB, why string) {
	if testing.Short() {
		t.Helper()
		t.Skip("-short: " + why + "; make test runs it")
	}
}
