package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	out := `goos: linux
BenchmarkPortForwardIperf3/up-1-2   1  10017926701 ns/op  2637 direct-MiB/s  0.1304 ratio  343.9 relayed-MiB/s
BenchmarkPortForwardConnect-2  300  2302833 ns/op  115.0 direct-p50-µs  14.91 ratio  1715 relayed-p50-µs
BenchmarkJobClaimLatency/N=4-2   100   123 ns/op   0.48 notify_vs_poll_ratio
BenchmarkVerify/Mixed ran with a log line
PASS
`
	got, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, metric string
		want         float64
	}{
		{"BenchmarkPortForwardIperf3/up-1", "ratio", 0.1304},
		{"BenchmarkPortForwardIperf3/up-1", "relayed-MiB/s", 343.9},
		{"BenchmarkPortForwardConnect", "relayed-p50-µs", 1715},
		{"BenchmarkJobClaimLatency/N=4", "notify_vs_poll_ratio", 0.48},
	} {
		if v, ok := got[c.name][c.metric]; !ok || v != c.want {
			t.Errorf("%s %s: got %v (%v), want %v", c.name, c.metric, v, ok, c.want)
		}
	}
	if _, ok := got["BenchmarkVerify/Mixed"]; ok {
		t.Error("a log line was taken for a result")
	}
	// Every row names a benchmark the project has, or none.
	for _, r := range rows {
		if r.benchmark != "" && r.metric == "" {
			t.Errorf("row %q names a benchmark but no metric", r.measure)
		}
	}
}
