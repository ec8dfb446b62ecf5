package coderdtest

import (
	"go.uber.org/goleak"
)

// Main adapts a package's testing.M for goleak.VerifyTestMain, so that the
// leak check runs after RunMain has stopped the built-in PostgreSQL and
// removed what the tests built:
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(coderdtest.Main(m), coderdtest.LeakOptions()...)
//	}
//
// A goroutine still running then is one that no Close, Shutdown or test
// cleanup waited for.
func Main(m interface{ Run() int }) goleak.TestingM {
	return mainFunc(func() int { return RunMain(m) })
}

// mainFunc is a goleak.TestingM.
type mainFunc func() int

func (f mainFunc) Run() int { return f() }

// LeakOptions lists the goroutines that packages built on coderdtest may
// leave running without a bug of ours: each entry names exactly one
// third-party function and says why it outlives the tests. It is empty:
// a deployment's pgx pool, pubsub, replica heartbeat and HTTP servers all
// stop in its cleanup, and the clients' idle keep-alive connections end
// with the httptest servers that close them.
func LeakOptions() []goleak.Option { return nil }
