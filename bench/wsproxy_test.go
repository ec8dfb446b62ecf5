package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testregions"
)

// BenchmarkWorkspaceProxySSHRoundTrip is issue 34's latency measure: two
// regions (network namespaces joined by a link with 40 ms of delay each
// way, internal/testregions), the primary and PostgreSQL in A, a workspace
// proxy, the workspace (built by region B's provisioner, its agent
// connected to the proxy) and the user in B. Each iteration runs the built
// `coder ssh --stdio ws` in B twice, through the proxy (--proxy b) and
// through the primary (--proxy primary), speaks SSH to it, runs `cat` and
// times 200 one-byte round trips through each. It reports both medians
// (through the proxy: in-region latency; through the primary: the link's
// round trip and more), their ratio, and the link's own TCP round trip for
// scale. It needs root (namespaces).
//
//	go test ./bench/ -run '^$' -bench WorkspaceProxySSHRoundTrip -benchtime 1x
func BenchmarkWorkspaceProxySSHRoundTrip(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("BenchmarkWorkspaceProxySSHRoundTrip creates network namespaces: run it as root")
	}
	const (
		delay = 40 * time.Millisecond
		n     = 200
	)
	d := testregions.NewDeployment(b, testregions.DeploymentOptions{
		Coder: testbin.Coder(b), ProviderMirror: testprovider.Mirror(b),
		Template: filepath.Join("..", "examples", "templates", "process"),
		Delay:    delay, Prefix: "coder-bench-wsproxy",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	link, err := testregions.RoundTrip(ctx, d.B, d.A, 20)
	if err != nil {
		b.Fatal(err)
	}
	var viaProxy, viaPrimary []time.Duration
	for b.Loop() {
		for _, side := range []struct {
			region string
			into   *[]time.Duration
		}{{d.ProxyName, &viaProxy}, {"primary", &viaPrimary}} {
			rtts, _, err := d.SSHRoundTrips(ctx, n, nil, "--proxy", side.region)
			if err != nil {
				b.Fatalf("%v\nproxy:\n%s", err, d.Proxy().Tail(20))
			}
			*side.into = append(*side.into, rtts...)
		}
	}
	proxy, primary := testregions.Median(viaProxy), testregions.Median(viaPrimary)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(proxy), "proxy-p50-ms")
	b.ReportMetric(ms(primary), "primary-p50-ms")
	b.ReportMetric(float64(primary)/float64(proxy), "primary/proxy")
	b.ReportMetric(ms(link), "link-rtt-ms")
}
