package coderd_test

import (
	"context"
	"net/http"
	"testing"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
)

// The replica relay endpoint is for replicas only: no secret or a wrong one
// is 401 (a user's session token does not help), the right one without the
// upgrade is 426.
func TestReplicaRelayEndpointRefuses(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	secret, err := d.DB.DeploymentValue(context.Background(), "replica_relay_secret", "")
	if err != nil || len(secret) != 64 {
		t.Fatalf("replica secret %q: %v, want 64 hex digits created at start", secret, err)
	}
	wrong := secret[:63] + "0"
	if secret[63] == '0' {
		wrong = secret[:63] + "1"
	}
	for _, tc := range []struct {
		name, secret, token string
		want                int
	}{
		{"no secret", "", "", http.StatusUnauthorized},
		{"an owner's session", "", owner.SessionToken, http.StatusUnauthorized},
		{"wrong secret", wrong, "", http.StatusUnauthorized},
		{"right secret, no upgrade", secret, "", http.StatusUpgradeRequired},
	} {
		req, _ := http.NewRequest(http.MethodGet, d.URL.String()+"/api/v2/replicas/relay", nil)
		if tc.secret != "" {
			req.Header.Set(coderd.ReplicaSecretHeader, tc.secret)
		}
		if tc.token != "" {
			req.Header.Set("Coder-Session-Token", tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}
