package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"airgapcoder/codersdk"
)

// The dashboard readers of the load benchmarks run in a process of their
// own (this test binary again, BENCH_READERS=1), as a user's browser is:
// in the benchmark's process they would share its Go scheduler and
// garbage collector with thousands of agents, which are on other machines
// at a site, and their latencies would measure the agents' process as
// much as the server.

// readerPaths are what a dashboard reads.
var readerPaths = []string{"/api/v2/workspaces?limit=25", "/api/v2/users/me", "/api/v2/organizations/default/templates", "/api/v2/buildinfo"}

// readerResult is what the readers' process writes when its stdin closes.
type readerResult struct {
	Latencies []time.Duration `json:"latencies"` // of the answers 200
	Errors    int             `json:"errors"`    // other answers and failed requests
}

// readers is the readers' process.
type readers struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer
}

// startReaders starts four readers as c, each reading every 20 ms, until
// stop.
func startReaders(b testing.TB, c *codersdk.Client) *readers {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	r := &readers{cmd: exec.Command(exe)}
	r.cmd.Env = append(os.Environ(), "BENCH_READERS=1", "BENCH_READERS_URL="+c.URL.String(), "BENCH_READERS_TOKEN="+c.SessionToken)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, os.Stderr
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		b.Fatalf("start the readers' process: %v", err)
	}
	b.Cleanup(func() { _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() })
	return r
}

// stop stops the readers and returns the latencies, sorted, and the error
// count.
func (r *readers) stop() ([]time.Duration, int) {
	_ = r.stdin.Close()
	if err := r.cmd.Wait(); err != nil {
		panic("the readers' process: " + err.Error())
	}
	var res readerResult
	if err := json.Unmarshal(r.out.Bytes(), &res); err != nil {
		panic("the readers' result: " + err.Error())
	}
	slices.Sort(res.Latencies)
	return res.Latencies, res.Errors
}

// runReaders is the readers' process: it reads until its stdin closes,
// then writes a readerResult to stdout.
func runReaders() int {
	u, err := url.Parse(os.Getenv("BENCH_READERS_URL"))
	if err != nil {
		os.Stderr.WriteString("readers: " + err.Error() + "\n")
		return 2
	}
	c := codersdk.New(u)
	c.SessionToken = os.Getenv("BENCH_READERS_TOKEN")
	c.HTTPClient = loopbackClient
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()

	var mu sync.Mutex
	var res readerResult
	var wg sync.WaitGroup
	for k := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				start := time.Now()
				resp, err := c.Request(ctx, http.MethodGet, readerPaths[(i+k)%len(readerPaths)], nil)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						res.Errors++
						mu.Unlock()
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode != http.StatusOK {
					res.Errors++ // a refusal is not a latency
				} else {
					res.Latencies = append(res.Latencies, time.Since(start))
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // paces the client: a dashboard's reads
			}
		})
	}
	wg.Wait()
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 1
	}
	return 0
}
