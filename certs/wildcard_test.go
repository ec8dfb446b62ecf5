package certs

import (
	"slices"
	"testing"
)

// TestEnsureServerWildcard: a wildcard host (subdomain apps) is issued as
// that DNS name, verifies app hosts under it, and does not make every
// later start issue the certificate again.
func TestEnsureServerWildcard(t *testing.T) {
	dir := t.TempDir()
	opts, _ := fakeSystem(t)
	hosts := []string{"localhost", "coder.example.internal", "*.apps.example.internal"}
	res, err := EnsureServer(dir, hosts, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Issued || !slices.Contains(res.Server.DNSNames, "*.apps.example.internal") {
		t.Fatalf("got issued %v with names %v, want *.apps.example.internal among them", res.Issued, res.Server.DNSNames)
	}
	if err := res.Server.VerifyHostname("web--main--dev--alice.apps.example.internal"); err != nil {
		t.Errorf("an app host: %v", err)
	}
	if err := res.Server.VerifyHostname("a.b.apps.example.internal"); err == nil {
		t.Error("a host two labels below the wildcard verified")
	}
	res, err = EnsureServer(dir, hosts, opts)
	if err != nil || res.Issued {
		t.Errorf("second start: issued %v (%s), %v; want the certificate kept", res.Issued, res.Reason, err)
	}
	if got := uncovered(res.Server, []string{"*.other.example.internal"}); len(got) != 1 {
		t.Errorf("another wildcard: got uncovered %v, want it", got)
	}
}
