// Package bench holds the control plane's end-to-end benchmarks: a real coderd
// API over a real PostgreSQL (coderdtest), driven through its HTTP API on
// loopback. Each benchmark runs the obvious alternative side by side in the
// same run and reports the ratio, because a shared machine is too noisy for
// absolute numbers to mean much on their own.
//
// Everything lives in _test.go files; this package ships no code. Speed is
// measured here and never asserted in unit tests. See README.md.
package bench
