package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/codersdk"
)

// The metadata collector runs the agent's metadata blocks as Coder's agent
// does: each script every IntervalSeconds (at least one second), never two
// runs of one key at once, stopped after TimeoutSeconds (or, when that is
// zero, after the interval). A result's Value is the trimmed stdout (at
// most maxMetadataValue bytes); its Error says why a run failed: what it
// wrote to stderr, else its exit status, or that it timed out. Results are
// posted in batches, the latest per key, every flush interval; while coderd
// is away they wait (only the latest per key is kept).

const (
	// maxMetadataValue caps a metadata value (and error), as Coder does.
	maxMetadataValue = 10 << 10
	// maxMetadataPerPost is how many results coderd takes in one post.
	maxMetadataPerPost = 128
)

// metadataPoster sends results to coderd (*codersdk.Client).
type metadataPoster interface {
	PostAgentMetadata(ctx context.Context, req codersdk.PostAgentMetadataRequest) error
}

type metadataCollector struct {
	log    *slog.Logger
	poster metadataPoster
	env    execEnv
	descs  []codersdk.AgentMetadataDescription
	// flushEvery is how often collected results are posted.
	flushEvery time.Duration
	// clock drives the flush and each key's interval (the real clock
	// unless the agent sets its own).
	clock quartz.Clock

	mu      sync.Mutex
	pending map[string]codersdk.AgentMetadataResult
	refused bool // coderd refused a batch for good; logged once
}

func newMetadataCollector(log *slog.Logger, poster metadataPoster, env execEnv, descs []codersdk.AgentMetadataDescription, flushEvery time.Duration) *metadataCollector {
	return &metadataCollector{log: log, poster: poster, env: env, descs: descs, flushEvery: flushEvery,
		pending: map[string]codersdk.AgentMetadataResult{}, clock: quartz.NewReal()}
}

// run collects and posts until ctx ends.
func (c *metadataCollector) run(ctx context.Context) {
	if len(c.descs) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, d := range c.descs {
		wg.Go(func() { c.collectLoop(ctx, d) })
	}
	t := c.clock.NewTicker(c.flushEvery, "agent", "metadataFlush")
	defer t.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-t.C:
			c.flush(ctx)
		}
	}
	wg.Wait()
}

// collectLoop runs one key's script at its interval on the collector's
// clock (a timer tagged "agent", "metadataInterval" and the key): a run
// that takes longer than the interval delays the next one rather than
// overlapping it.
func (c *metadataCollector) collectLoop(ctx context.Context, d codersdk.AgentMetadataDescription) {
	interval := time.Duration(max(d.IntervalSeconds, 1)) * time.Second
	timeout := time.Duration(d.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = interval
	}
	tags := []string{"agent", "metadataInterval", d.Key}
	t := c.clock.NewTimer(0, tags...)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		began := c.clock.Now()
		res := c.collect(ctx, d.Script, timeout)
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		c.pending[d.Key] = res
		c.mu.Unlock()
		t.Reset(max(0, interval-c.clock.Since(began)), tags...)
	}
}

// collect runs script once. Its result is stamped with the clock's time;
// the timeout bounds the real process, so it is on real time.
func (c *metadataCollector) collect(ctx context.Context, script string, timeout time.Duration) codersdk.AgentMetadataResult {
	res := codersdk.AgentMetadataResult{CollectedAt: c.clock.Now().UTC()}
	cmd := c.env.command(script)
	stdout := &cappedBuffer{max: maxMetadataValue}
	stderr := &cappedBuffer{max: maxMetadataValue}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A background process that keeps the output open does not hold the
	// result.
	cmd.WaitDelay = 500 * time.Millisecond
	setProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		res.Error = fmt.Sprintf("start %s: %v", cmd.Path, err)
		return res
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	var err error
	timedOut := false
	select {
	case err = <-waited:
	case <-t.C:
		timedOut = true
	case <-ctx.Done():
	}
	if err == nil && (timedOut || ctx.Err() != nil) {
		_ = signalGroup(cmd.Process, syscall.SIGKILL)
		err = <-waited
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil
	}
	res.Value = cleanOutput(stdout.String())
	switch {
	case timedOut:
		res.Error = fmt.Sprintf("timed out after %s", timeout)
	case err != nil:
		if msg := cleanOutput(stderr.String()); msg != "" {
			res.Error = msg
		} else {
			res.Error = fmt.Sprintf("exit status %d", exitCode(err))
		}
	}
	return res
}

func cleanOutput(s string) string {
	return strings.ToValidUTF8(strings.TrimSpace(strings.ReplaceAll(s, "\x00", "")), "\uFFFD")
}

// flush posts the results collected since the last flush. A batch coderd
// could not take for now is kept (newer results of the same key replace
// it); one it refuses is dropped.
func (c *metadataCollector) flush(ctx context.Context) {
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	batch := c.pending
	c.pending = map[string]codersdk.AgentMetadataResult{}
	c.mu.Unlock()
	updates := make([]codersdk.AgentMetadataUpdate, 0, len(batch))
	for k, r := range batch {
		updates = append(updates, codersdk.AgentMetadataUpdate{Key: k, Result: r})
	}
	for chunk := range slices.Chunk(updates, maxMetadataPerPost) {
		postCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.poster.PostAgentMetadata(postCtx, codersdk.PostAgentMetadataRequest{Metadata: chunk})
		cancel()
		if err != nil {
			c.keep(chunk, err)
		}
	}
}

// keep puts back the results of a post that failed with err, unless coderd
// refused them for good.
func (c *metadataCollector) keep(updates []codersdk.AgentMetadataUpdate, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if permanent(err) {
		if !c.refused {
			c.log.Warn("coderd refuses agent metadata; dropping results", "err", err)
			c.refused = true
		}
		return
	}
	c.log.Debug("post agent metadata; will retry", "err", err)
	for _, u := range updates {
		if _, newer := c.pending[u.Key]; !newer {
			c.pending[u.Key] = u.Result
		}
	}
}

// cappedBuffer keeps the first max bytes written to it and discards the
// rest (without failing the writer).
type cappedBuffer struct {
	max int
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *cappedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
