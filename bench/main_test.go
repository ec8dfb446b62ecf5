package bench

import (
	"os"
	"testing"

	"airgapcoder/coderd/coderdtest"
)

func TestMain(m *testing.M) {
	if os.Getenv("BENCH_READERS") == "1" { // the load benchmarks' readers (readers_test.go)
		os.Exit(runReaders())
	}
	os.Exit(coderdtest.RunMain(m))
}
