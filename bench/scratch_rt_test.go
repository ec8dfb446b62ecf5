package bench

import (
	"io"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
)

func BenchmarkScratchRT(b *testing.B) {
	w := newRelayWorkspace(b)
	echo := coderdtest.EchoServer(b)
	local := w.portForward(b, echo)
	connectRoundTrip(b, local)
	rt := func(port int) []time.Duration {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		var out []time.Duration
		var one [1]byte
		for i := 0; i < 300; i++ {
			s := time.Now()
			c.Write([]byte{'x'})
			io.ReadFull(c, one[:])
			out = append(out, time.Since(s))
		}
		slices.Sort(out)
		return out
	}
	for b.Loop() {
		d := rt(echo)
		r := rt(local)
		b.ReportMetric(float64(d[150].Microseconds()), "direct-rt-µs")
		b.ReportMetric(float64(r[150].Microseconds()), "relayed-rt-µs")
	}
}
