package provisionerd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// cliConfig is the CLI configuration each job gets: the mirror is the only
// installation method (no direct block), so terraform never reaches a
// registry. Each module host gets a host block whose modules.v1 is the
// module mirror's folder for that host.
func cliConfig(mirror, pluginCache, moduleMirror string, moduleHosts []string) string {
	var b strings.Builder
	b.WriteString("disable_checkpoint = true\n")
	fmt.Fprintf(&b, "plugin_cache_dir = %q\n", pluginCache)
	for _, h := range moduleHosts {
		fmt.Fprintf(&b, "host %q {\n  services = {\n    \"modules.v1\" = %q\n  }\n}\n", h, strings.TrimSuffix(moduleMirror, "/")+"/"+h+"/")
	}
	b.WriteString("provider_installation {\n")
	switch {
	case strings.HasPrefix(mirror, "https://"):
		fmt.Fprintf(&b, "  network_mirror {\n    url = %q\n  }\n", mirror)
	case mirror != "":
		fmt.Fprintf(&b, "  filesystem_mirror {\n    path = %q\n  }\n", mirror)
	default:
		// No mirror: nothing may be installed at all.
		b.WriteString("  filesystem_mirror {\n    path = \"/nonexistent/coder-provider-mirror\"\n  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// mirrorClient is the client that asks the mirrors, trusting caFile (the
// system roots when empty).
func mirrorClient(caFile string) (*http.Client, error) {
	client := &http.Client{Timeout: 30 * time.Second}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("module mirror trust: %w", err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	return client, nil
}

// moduleHosts asks the module mirror which registry hosts it serves
// modules of (none when there is no mirror).
func (d *Daemon) moduleHosts(ctx context.Context) ([]string, error) {
	if d.opts.ModuleMirror == "" {
		return nil, nil
	}
	var body struct {
		Hosts []string `json:"hosts"`
	}
	found, err := getJSON(ctx, d.mirrorClient, d.opts.ModuleMirror, &body)
	if err == nil && !found {
		err = errors.New("not found")
	}
	if err != nil {
		return nil, fmt.Errorf("module mirror %s: %w", d.opts.ModuleMirror, err)
	}
	return body.Hosts, nil
}
