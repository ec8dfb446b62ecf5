package appliance

import (
	"slices"
	"strings"
	"testing"
)

// TestOverviewRedactedConfig: the overview's settings name every key of
// appliance.yaml (a new key cannot be forgotten) and hold no password.
func TestOverviewRedactedConfig(t *testing.T) {
	c := DefaultConfig()
	c.PostgresURL = "postgres://coder:planted-password@db.example.internal/coder?sslmode=verify-full&sslpassword=planted-ssl"
	c.EgressAllow = []string{"git.example.internal"}
	c.ProxySessionToken = "0d6e:planted-proxy-token" // a proxy's
	got := redactedConfig(c)
	for key := range knownKeys {
		if _, ok := got[key]; !ok {
			t.Errorf("the overview's settings lack %s: %v", key, got)
		}
	}
	if pg := got["postgres-url"]; pg != "postgres://coder:[redacted]@db.example.internal/coder?sslmode=verify-full&sslpassword=[redacted]" {
		t.Errorf("postgres-url: got %q", pg)
	}
	if got["provisioner-daemons"] != 3 || got["block-direct-connections"] != true || got["tls-address"] != "127.0.0.1:3443" ||
		!slices.Equal(got["egress-allow"].([]string), []string{"git.example.internal"}) {
		t.Errorf("got %v", got)
	}
	for k, v := range got {
		if s, ok := v.(string); ok && strings.Contains(s, "planted") {
			t.Errorf("%s holds a planted secret: %q", k, s)
		}
	}
}
