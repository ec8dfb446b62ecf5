package provisionerd

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"time"

	"airgapcoder/codersdk"
)

// jobLogs buffers a job's log lines, stamped with the daemon's clock, and
// sends them to coderd with the heartbeats: at least every heartbeat
// interval, and within flushEvery while lines flow. When coderd answers
// that the job was canceled, or that the daemon no longer holds it,
// onCancel is called.
type jobLogs struct {
	d        *Daemon
	jobID    string
	onCancel func(reason string)

	mu      sync.Mutex
	pending []codersdk.ProvisionerJobLogInput
	stage   string

	done chan struct{}
	wg   sync.WaitGroup
}

const flushEvery = 250 * time.Millisecond

func newJobLogs(d *Daemon, jobID string, onCancel func(string)) *jobLogs {
	l := &jobLogs{d: d, jobID: jobID, onCancel: onCancel, done: make(chan struct{})}
	l.wg.Add(1)
	go l.run()
	return l
}

// Stage starts a new stage: later lines carry its name.
func (l *jobLogs) Stage(name string) {
	l.mu.Lock()
	l.stage = name
	l.mu.Unlock()
	l.add(codersdk.LogSourceProvisionerDaemon, codersdk.LogLevelInfo, name)
}

func (l *jobLogs) add(source, level, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = append(l.pending, codersdk.ProvisionerJobLogInput{
		CreatedAt: l.d.opts.Clock.Now("provisionerd", "logLine").UTC(), Source: source, Level: level, Stage: l.stage, Output: line,
	})
}

// Infof logs a daemon line.
func (l *jobLogs) Info(line string) {
	l.add(codersdk.LogSourceProvisionerDaemon, codersdk.LogLevelInfo, line)
}

// Error logs a daemon error line.
func (l *jobLogs) Error(line string) {
	l.add(codersdk.LogSourceProvisionerDaemon, codersdk.LogLevelError, line)
}

// Writer returns an io.Writer that turns terraform output into log lines.
func (l *jobLogs) Writer(level string) *lineWriter {
	return &lineWriter{emit: func(s string) { l.add(codersdk.LogSourceProvisioner, level, s) }}
}

// run flushes the lines within flushEvery while they flow, and sends a
// heartbeat (an update without lines) when nothing was sent for the
// heartbeat interval: a timer re-armed after every update.
func (l *jobLogs) run() {
	defer l.wg.Done()
	clock := l.d.opts.Clock
	flush := clock.NewTicker(flushEvery, "provisionerd", "logFlush")
	defer flush.Stop()
	beat := clock.NewTimer(l.d.heartbeatInterval(), "provisionerd", "heartbeat")
	defer beat.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-flush.C:
			l.mu.Lock()
			n := len(l.pending)
			l.mu.Unlock()
			if n == 0 {
				continue
			}
		case <-beat.C:
		}
		l.flush()
		beat.Reset(l.d.heartbeatInterval(), "provisionerd", "heartbeat")
	}
}

// flush sends what is pending (and counts as a heartbeat).
func (l *jobLogs) flush() {
	ctx, cancel := l.d.withTimeout(context.Background(), attemptFor, "logFlush")
	defer cancel()
	_ = l.send(ctx)
}

// send sends what is pending. Lines coderd did not take stay pending for
// the next attempt (coderd may be restarting) and the error says why.
func (l *jobLogs) send(ctx context.Context) error {
	l.mu.Lock()
	batch := l.pending
	l.pending = nil
	l.mu.Unlock()
	resp, err := l.d.opts.Client.UpdateJob(ctx, l.d.ID(), l.jobID, codersdk.UpdateJobRequest{Logs: batch})
	switch {
	case err == nil && resp.Canceled:
		l.onCancel("the job was canceled")
	case codersdk.IsStatus(err, http.StatusConflict):
		l.onCancel("coderd no longer assigns this job to this daemon: " + err.Error())
	case err != nil:
		l.mu.Lock()
		l.pending = append(batch, l.pending...)
		l.mu.Unlock()
		l.d.log.Warn("send job update", "job", l.jobID, "err", err)
		return err
	}
	return nil
}

// Close stops the sender and sends the rest, again with backoff while
// coderd cannot take it: the job's end is reported only after its last
// lines, so a moment's outage at the end must not lose them.
func (l *jobLogs) Close() {
	close(l.done)
	l.wg.Wait()
	l.mu.Lock()
	n := len(l.pending)
	l.mu.Unlock()
	if n == 0 {
		return
	}
	ctx, cancel := l.d.withTimeout(context.Background(), fetchFor, "closeLogs")
	defer cancel()
	if err := l.d.retryTransient(ctx, l.d.log.With("job", l.jobID), "send the job's last log lines", fetchFor, l.send); err != nil {
		l.d.log.Error("send the job's last log lines", "job", l.jobID, "lines", n, "err", err)
	}
}

// lineWriter splits a byte stream into lines.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	emit func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(bytes.TrimRight(w.buf.Next(i+1), "\r\n"))
		w.emit(line)
	}
}

// Flush emits an unterminated last line.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() > 0 {
		w.emit(w.buf.String())
		w.buf.Reset()
	}
}
