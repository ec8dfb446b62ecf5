package appliance

import (
	"fmt"
	"net/url"
	"strings"
)

// postgresTrusting returns an external database's URL (postgres-url) with
// sslrootcert set to trustFile when it asks for the database's certificate
// to be verified (sslmode verify-ca or verify-full) without naming a CA:
// the appliance trusts for its database what it trusts everywhere else (its
// CA, the site CAs imported with coder certs import, the system roots),
// where a bare sslmode=verify-full would trust the system roots only. A URL
// that names its sslrootcert, or does not verify, is returned as it is. Both
// forms PostgreSQL takes work: a postgres:// URL and "key=value" words.
func postgresTrusting(raw, trustFile string) (string, error) {
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		u, err := url.Parse(raw)
		if err != nil {
			return "", fmt.Errorf("postgres-url: %w", err)
		}
		q := u.Query()
		if !verifies(q.Get("sslmode")) || q.Has("sslrootcert") {
			return raw, nil
		}
		q.Set("sslrootcert", trustFile)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	mode, root := "", false
	for _, w := range strings.Fields(raw) {
		k, v, _ := strings.Cut(w, "=")
		switch strings.TrimSpace(k) {
		case "sslmode":
			mode = strings.Trim(v, `'`)
		case "sslrootcert":
			root = true
		}
	}
	if !verifies(mode) || root {
		return raw, nil
	}
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(trustFile)
	return raw + " sslrootcert='" + quoted + "'", nil
}

// verifies says whether an sslmode checks the server's certificate.
func verifies(sslmode string) bool { return sslmode == "verify-ca" || sslmode == "verify-full" }
