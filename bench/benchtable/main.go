// Command benchtable reads the output of `go test -bench` (what `make bench`
// collects from every benchmark of the project) on standard input and prints
// one table: each measure, the alternative it runs against in the same
// benchmark, the ratio measured, the goal, and whether the goal is met. A
// measure whose benchmark did not run shows "not run"; one that nothing
// measures yet says so. It only reads and prints: goals live here and
// nowhere else, and no test asserts them (these machines are noisy).
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
)

// row is one measure: the metric a benchmark reports and its goal.
type row struct {
	measure     string
	alternative string
	benchmark   string // the benchmark's name, without the -N CPU suffix
	metric      string // the unit of the reported metric
	atMost      bool   // the goal is an upper bound (else a lower bound)
	goal        float64
}

var rows = []row{
	{"bulk TCP through coder port-forward (HTTPS), up, 1 stream", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/https/up-1", "ratio", false, 0.5},
	{"bulk TCP through coder port-forward (HTTPS), down, 1 stream", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/https/down-1", "ratio", false, 0.5},
	{"bulk TCP through coder port-forward (HTTPS), up, 4 streams", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/https/up-4", "ratio", false, 0.5},
	{"bulk TCP through coder port-forward (HTTPS), down, 4 streams", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/https/down-4", "ratio", false, 0.5},
	{"  three HAProxy hops instead, TLS between them, up, 1 stream", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/https/up-1", "haproxy3-ratio", false, 0},
	{"  three HAProxy hops instead, TLS between them, down, 1 stream", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/https/down-1", "haproxy3-ratio", false, 0},
	{"  three HAProxy hops instead, TLS between them, up, 4 streams", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/https/up-4", "haproxy3-ratio", false, 0},
	{"  three HAProxy hops instead, TLS between them, down, 4 streams", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/https/down-4", "haproxy3-ratio", false, 0},
	{"  the same over plain HTTP, up, 1 stream", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/http/up-1", "ratio", false, 0},
	{"  the same over plain HTTP, down, 1 stream", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/http/down-1", "ratio", false, 0},
	{"  the same over plain HTTP, up, 4 streams", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/http/up-4", "ratio", false, 0},
	{"  the same over plain HTTP, down, 4 streams", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/http/down-4", "ratio", false, 0},
	{"  three HAProxy hops instead, plain TCP, up, 1 stream", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/http/up-1", "haproxy3-ratio", false, 0},
	{"  three HAProxy hops instead, plain TCP, down, 1 stream", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/http/down-1", "haproxy3-ratio", false, 0},
	{"  three HAProxy hops instead, plain TCP, up, 4 streams", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/http/up-4", "haproxy3-ratio", false, 0},
	{"  three HAProxy hops instead, plain TCP, down, 4 streams", "iperf3 directly on loopback", "BenchmarkPortForwardIperf3/http/down-4", "haproxy3-ratio", false, 0},
	{"bulk TCP through coder port-forward via another replica", "the same via the agent's replica", "BenchmarkPortForwardAcrossReplicas", "ratio", false, 0},
	{"coderd heap per idle relayed connection, KiB", "", "BenchmarkIdleRelayedConnections", "coderd-heap-KiB/conn", true, 0},
	{"coder ssh: cat of 1 GiB to /dev/null", "the same cat locally", "BenchmarkSSHCat", "ratio", false, 0.4},
	{"  the same through OpenSSH (coder config-ssh)", "the same cat locally", "BenchmarkSSHCat", "openssh-ratio", false, 0},
	{"coder ssh round trip in region B through its workspace proxy, ms (40 ms each way between regions)", "", "BenchmarkWorkspaceProxySSHRoundTrip", "proxy-p50-ms", true, 40},
	{"  the same through the primary, in region A, ms", "", "BenchmarkWorkspaceProxySSHRoundTrip", "primary-p50-ms", false, 80},
	{"  through the primary / through the proxy", "", "BenchmarkWorkspaceProxySSHRoundTrip", "primary/proxy", false, 0},
	{"new connection + 1 round trip through coder port-forward (HTTPS)", "directly on loopback", "BenchmarkPortForwardConnect/https", "ratio", true, 5},
	{"  the same, p50 in µs", "", "BenchmarkPortForwardConnect/https", "relayed-p50-µs", true, 1000},
	{"  three HAProxy hops instead, TLS between them", "directly on loopback", "BenchmarkPortForwardConnect/https", "haproxy3-ratio", true, 0},
	{"  the same over plain HTTP", "directly on loopback", "BenchmarkPortForwardConnect/http", "ratio", true, 0},
	{"  three HAProxy hops instead, plain TCP", "directly on loopback", "BenchmarkPortForwardConnect/http", "haproxy3-ratio", true, 0},
	{"coder bundle verify (time)", "sha256sum of the file", "BenchmarkVerify/Mixed", "verify/sha256sum", true, 1.2},
	{"coder appliance install of a delta bundle (time)", "of the full bundle", "BenchmarkApplianceDeltaInstall", "delta/full", true, 1.0},
	{"delta bundle of a new coder binary (size)", "the binary compressed", "BenchmarkApplianceDeltaInstall", "delta/binary", true, 1.1},
	{"  the same extract, in process (time)", "extract of the full bundle", "BenchmarkDeltaInstall", "delta/full", true, 1.0},
	{"coder bundle build of images, cold cache (time)", "crane pull --format oci", "BenchmarkBundleBuildImages", "bundle/crane", true, 1.2},
	{"  the same, each until its output is on disk", "crane pull --format oci, then sync", "BenchmarkBundleBuildImages", "bundle/crane+sync", true, 0},
	{"  the same", "skopeo copy --all to an OCI layout", "BenchmarkBundleBuildImages", "bundle/skopeo", true, 1.2},
	{"  the same, in process (small layers)", "crane.Pull and a layout write", "BenchmarkBuildImages", "bundle/crane", true, 0},
	{"image pull through coder mirror serve (time)", "skopeo from the OCI layout on disk", "BenchmarkMirrorPull", "mirror/disk", true, 1.3},
	{"  the same, in process (ggcr over HTTPS)", "a bare read and hash of the layout", "BenchmarkImagePull", "registry/disk", true, 0},
	{"terraform init through the network mirror (time)", "the filesystem mirror", "BenchmarkTerraformInit", "network/filesystem", true, 0},
	{"dashboard /workspaces with 1,000 workspaces (time)", "GET /api/v2/workspaces", "BenchmarkWorkspaceList1000", "page/api", true, 0},
	{"  the same, page in ms", "", "BenchmarkWorkspaceList1000", "page-ms", true, 1000},
	{"job claim, long-poll, 4 waiting daemons (time)", "a 100 ms poller", "BenchmarkJobClaimLatency/N=4", "notify_vs_poll_ratio", true, 0},
	{"GET /api/v2/workspaces, 10,000 rows (time)", "raw pgx", "BenchmarkListWorkspaces10k/all", "api_vs_raw_ratio", true, 0},
	{"process workspace build (time)", "terraform init + apply by hand", "BenchmarkProcessWorkspaceBuild", "build_vs_raw_terraform_ratio", true, 0},
	{"coderd with 200 agents and 50 builds: peak RSS in MB", "", "BenchmarkLoad200Agents", "server-peak-RSS-MB", true, 300},
	{"  the same: API p99 in ms", "", "BenchmarkLoad200Agents", "api-p99-ms", true, 100},
	{"  the same: failed builds", "", "BenchmarkLoad200Agents", "failed-builds", true, 0.5},
	{"  the same: API reads refused or failed", "", "BenchmarkLoad200Agents", "api-errors", true, 0.5},
	{"  the same: agents connected at the end", "", "BenchmarkLoad200Agents", "agents-connected", false, 200},
	{"coderd with 5,000 agents: seconds until every agent is connected", "", "BenchmarkLoad5000Agents", "connect-all-s", true, 120},
	{"  the same, with 50 builds: peak RSS in MB", "", "BenchmarkLoad5000Agents", "server-peak-RSS-MB", true, 1024},
	{"  the same: API p99 in ms", "", "BenchmarkLoad5000Agents", "api-p99-ms", true, 100},
	{"  the same: failed builds", "", "BenchmarkLoad5000Agents", "failed-builds", true, 0.5},
	{"  the same: API reads refused or failed", "", "BenchmarkLoad5000Agents", "api-errors", true, 0.5},
	{"  the same: agents connected at the end", "", "BenchmarkLoad5000Agents", "agents-connected", false, 5000},
	{"  after a SIGKILL and a restart: seconds until every agent is back", "", "BenchmarkLoad5000Agents", "reconnect-all-s", true, 60},
	{"  the same: API reads refused or failed during the storm", "", "BenchmarkLoad5000Agents", "storm-api-errors", true, 0.5},
	{"coderd soak (-soak-duration, 30m in make bench), 1,000 agents, builds, ssh: RSS growth in %", "", "BenchmarkSoak", "rss-growth-pct", true, 10},
	{"  the same: goroutine growth in % (the benchmark also fails below -2)", "", "BenchmarkSoak", "goroutine-growth-pct", true, 2},
	{"  the same: build log lines lost", "", "BenchmarkSoak", "build-log-lines-lost", true, 0.5},
	{"  the same: agent log lines lost", "", "BenchmarkSoak", "agent-log-lines-lost", true, 0.5},
	{"  the same: ssh sessions failed", "", "BenchmarkSoak", "ssh-failed", true, 0.5},
	{"  the same: errors (API, builds, ssh)", "", "BenchmarkSoak", "errors", true, 0.5},
	{"  the same: agents connected at the end", "", "BenchmarkSoak", "agents-connected", false, 1000},
}

func main() {
	results, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "MEASURE\tALTERNATIVE\tMEASURED\tGOAL\tMET")
	for _, r := range rows {
		measured, goal, met := "not run", "—", ""
		if r.goal > 0 {
			op := "≥"
			if r.atMost {
				op = "≤"
			}
			goal = op + " " + strconv.FormatFloat(r.goal, 'g', -1, 64)
		}
		switch v, ok := results[r.benchmark][r.metric]; {
		case r.benchmark == "":
			measured = "not measured yet"
		case ok:
			measured = strconv.FormatFloat(v, 'g', 3, 64)
			if r.goal > 0 {
				met = "no"
				if (r.atMost && v <= r.goal) || (!r.atMost && v >= r.goal) {
					met = "yes"
				}
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.measure, r.alternative, measured, goal, met)
	}
	if err := w.Flush(); err != nil {
		os.Exit(1)
	}
}

// parse reads benchmark result lines ("BenchmarkX-2  N  V1 unit1  V2
// unit2 …") into name → unit → value; a benchmark run twice keeps the last.
func parse(r io.Reader) (map[string]map[string]float64, error) {
	out := map[string]map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue // a log line that starts with a benchmark's name
		}
		name := fields[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		metrics := map[string]float64{}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				break
			}
			metrics[fields[i+1]] = v
		}
		out[name] = metrics
	}
	return out, sc.Err()
}
