package provisionerd_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testtier"
	"airgapcoder/provisionerd"
	"airgapcoder/terraform"
)

// fakeCoderd speaks the provisioner protocol over HTTPS with a certificate
// of its own, so that a test decides every field of an AcquiredJob and sees
// exactly what the daemon reports. It also serves agent binaries at
// /bin/<name>, as coderd does.
type fakeCoderd struct {
	t      *testing.T
	srv    *httptest.Server
	URL    string
	CAFile string // the server's certificate, PEM
	CAPEM  string

	jobs chan *codersdk.AcquiredJob

	mu       sync.Mutex
	files    map[string][]byte
	logs     map[string][]codersdk.ProvisionerJobLogInput
	results  map[string]chan jobResult
	binaries map[string][]byte
	// fileErrors is how many template downloads answer 500 before the
	// file is served, as coderd does while its database restarts;
	// registerErrors and acquireErrors the same for registrations and
	// acquisitions.
	fileErrors, registerErrors, acquireErrors int
	// holdFiles makes template downloads wait until the daemon gives up
	// the request: a job that stays in its first stage, sending nothing.
	holdFiles bool
	// heartbeatTimeout is the job heartbeat timeout registration answers
	// (zero: none said).
	heartbeatTimeout time.Duration
	// now stamps what the fake records (default time.Now): a test on a
	// mock clock passes the clock's.
	now func() time.Time

	// What the daemon asked: registrations, acquisitions and downloads
	// (answered or not), and every job update in order.
	registers, acquires, downloads int
	updates                        []jobUpdate
}

// jobUpdate is one UpdateJob the fake received: when (by f.now), for which
// job and the lines it carried (none: a heartbeat).
type jobUpdate struct {
	At    time.Time
	Job   string
	Lines []string
}

// jobResult is how a job ended: exactly one of Complete and Fail is set.
type jobResult struct {
	Complete *codersdk.CompleteJobRequest
	Fail     *codersdk.FailJobRequest
	Logs     []codersdk.ProvisionerJobLogInput
}

// LogText is the job's log, one line per log line.
func (r jobResult) LogText() string {
	var b strings.Builder
	for _, l := range r.Logs {
		fmt.Fprintf(&b, "%s: %s\n", l.Stage, l.Output)
	}
	return b.String()
}

func newFakeCoderd(t *testing.T) *fakeCoderd {
	t.Helper()
	f := &fakeCoderd{
		t: t, jobs: make(chan *codersdk.AcquiredJob, 8), files: map[string][]byte{}, binaries: map[string][]byte{},
		logs: map[string][]codersdk.ProvisionerJobLogInput{}, results: map[string]chan jobResult{},
	}
	mux := http.NewServeMux()
	const daemon = "/api/v2/provisionerdaemons/{daemon}"
	mux.HandleFunc("POST /api/v2/provisionerdaemons", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.registers++
		failing := useUp(&f.registerErrors)
		hb := f.heartbeatTimeout
		f.mu.Unlock()
		if failing {
			writeDatabaseGone(w)
			return
		}
		writeJSON(w, http.StatusCreated, codersdk.ProvisionerDaemon{ID: "daemon-1", JobHeartbeatTimeoutMillis: hb.Milliseconds()})
	})
	mux.HandleFunc("POST "+daemon+"/acquire", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.acquires++
		failing := useUp(&f.acquireErrors)
		f.mu.Unlock()
		if failing {
			writeDatabaseGone(w)
			return
		}
		wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
		select {
		case j := <-f.jobs:
			writeJSON(w, http.StatusOK, j)
		case <-time.After(wait):
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("POST "+daemon+"/jobs/{job}/update", func(w http.ResponseWriter, r *http.Request) {
		var req codersdk.UpdateJobRequest
		if !readJSON(w, r, &req) {
			return
		}
		f.mu.Lock()
		f.logs[r.PathValue("job")] = append(f.logs[r.PathValue("job")], req.Logs...)
		u := jobUpdate{At: f.stamp(), Job: r.PathValue("job")}
		for _, l := range req.Logs {
			u.Lines = append(u.Lines, l.Output)
		}
		f.updates = append(f.updates, u)
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, codersdk.UpdateJobResponse{})
	})
	mux.HandleFunc("POST "+daemon+"/jobs/{job}/complete", func(w http.ResponseWriter, r *http.Request) {
		var req codersdk.CompleteJobRequest
		if readJSON(w, r, &req) {
			f.finish(w, r.PathValue("job"), jobResult{Complete: &req})
		}
	})
	mux.HandleFunc("POST "+daemon+"/jobs/{job}/fail", func(w http.ResponseWriter, r *http.Request) {
		var req codersdk.FailJobRequest
		if readJSON(w, r, &req) {
			f.finish(w, r.PathValue("job"), jobResult{Fail: &req})
		}
	})
	mux.HandleFunc("GET "+daemon+"/files/{file}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.downloads++
		b, ok := f.files[r.PathValue("file")]
		failing := useUp(&f.fileErrors)
		hold := f.holdFiles
		f.mu.Unlock()
		if hold {
			<-r.Context().Done()
			return
		}
		if failing {
			writeDatabaseGone(w)
			return
		}
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /bin/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		b, ok := f.binaries[r.PathValue("name")]
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	})
	f.srv = httptest.NewUnstartedServer(mux)
	f.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // clients that do not trust the CA are expected
	f.srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	f.URL = f.srv.URL
	f.CAPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw}))
	f.CAFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f.CAFile, []byte("# the fake coderd's certificate\n"+f.CAPEM), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeCoderd) finish(w http.ResponseWriter, job string, res jobResult) {
	f.mu.Lock()
	res.Logs = f.logs[job]
	ch := f.results[job]
	f.mu.Unlock()
	if ch == nil {
		http.Error(w, `{"message":"unknown job"}`, http.StatusConflict)
		return
	}
	ch <- res
	writeJSON(w, http.StatusOK, codersdk.Response{Message: "ok"})
}

// stamp is the fake's time: f.now's, else the wall clock's. f.mu is held.
func (f *fakeCoderd) stamp() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

// count reads one of the fake's counters (registers, acquires, downloads).
func (f *fakeCoderd) count(n *int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *n
}

// jobUpdates is what UpdateJob has received so far.
func (f *fakeCoderd) jobUpdates() []jobUpdate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.updates)
}

// writeDatabaseGone answers as coderd does while its database restarts.
func writeDatabaseGone(w http.ResponseWriter) {
	writeJSON(w, http.StatusInternalServerError, codersdk.Response{Message: "Internal error", Detail: "FATAL: terminating connection due to unexpected postmaster exit (SQLSTATE 57P01)"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// client is a codersdk client of the fake that trusts its certificate.
func (f *fakeCoderd) client() *codersdk.Client {
	u, _ := url.Parse(f.URL)
	c := codersdk.New(u)
	c.ProvisionerPSK = "psk"
	c.HTTPClient = f.srv.Client()
	return c
}

// startDaemon runs a daemon against the fake with the official provider's
// mirror until the test ends; edit adjusts its options. It returns the
// daemon's own log.
func (f *fakeCoderd) startDaemon(t *testing.T, edit func(*provisionerd.Options)) *syncbuf.Buffer {
	t.Helper()
	return f.start(t, provisionerd.Options{
		TerraformPath: terraformPath(t), ProviderMirror: testprovider.Mirror(t),
		AcquireWait: time.Second, HeartbeatInterval: 500 * time.Millisecond, CancelGrace: 5 * time.Second,
	}, edit)
}

// startDaemonOn runs a daemon against the fake on clock, with no terraform
// installed: its jobs fail where terraform would run, so a test of what
// comes before needs no heavy tier. It returns the daemon's own log.
func (f *fakeCoderd) startDaemonOn(t *testing.T, clock quartz.Clock, edit func(*provisionerd.Options)) *syncbuf.Buffer {
	t.Helper()
	return f.start(t, provisionerd.Options{
		TerraformPath: filepath.Join(t.TempDir(), "terraform-not-installed"), Clock: clock,
		AcquireWait: time.Second, HeartbeatInterval: 500 * time.Millisecond, CancelGrace: 5 * time.Second,
	}, edit)
}

// start runs a daemon with opts, its client, name, work dir and logger set
// here, until the test ends.
func (f *fakeCoderd) start(t *testing.T, opts provisionerd.Options, edit func(*provisionerd.Options)) *syncbuf.Buffer {
	t.Helper()
	out := &syncbuf.Buffer{}
	opts.Client, opts.Name, opts.WorkDir = f.client(), "fake", t.TempDir()
	opts.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if edit != nil {
		edit(&opts)
	}
	d, err := provisionerd.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return out
}

// run hands the daemon job with the template files and waits for its end.
// With files nil, coderd has no file for the job.
func (f *fakeCoderd) run(t *testing.T, job codersdk.AcquiredJob, files map[string]string) jobResult {
	t.Helper()
	id, ended := f.submit(t, job, files)
	select {
	case res := <-ended:
		return res
	case <-time.After(3 * time.Minute):
		t.Fatalf("job %s did not end within 3 minutes", id)
	}
	return jobResult{}
}

// submit queues job for the daemon with the template files (nil: coderd
// has no file for the job, the download answers 404) and returns the id
// it gave the job and where the job's end arrives.
func (f *fakeCoderd) submit(t *testing.T, job codersdk.AcquiredJob, files map[string]string) (string, <-chan jobResult) {
	t.Helper()
	f.mu.Lock()
	n := len(f.results) + 1
	job.JobID = fmt.Sprintf("job-%d", n)
	job.FileID = fmt.Sprintf("file-%d", n)
	if job.CreatedAt.IsZero() {
		job.CreatedAt = f.stamp()
	}
	if files != nil {
		f.files[job.FileID] = coderdtest.TemplateTar(t, files)
	}
	ch := make(chan jobResult, 1)
	f.results[job.JobID] = ch
	f.mu.Unlock()
	f.jobs <- &job
	return job.JobID, ch
}

// mustComplete fails the test unless the job completed.
func mustComplete(t *testing.T, res jobResult) *codersdk.CompleteJobRequest {
	t.Helper()
	if res.Fail != nil {
		t.Fatalf("job failed: %s\nlogs:\n%s", res.Fail.Error, res.LogText())
	}
	return res.Complete
}

// mustFail fails the test unless the job failed, and returns its error.
func mustFail(t *testing.T, res jobResult) string {
	t.Helper()
	if res.Fail == nil {
		t.Fatalf("job completed, want it to fail\nlogs:\n%s", res.LogText())
	}
	return res.Fail.Error
}

// mustFailBeforeInit checks that the job failed before terraform init ran,
// with an error that says every one of want, and returns the error.
func mustFailBeforeInit(t *testing.T, res jobResult, want ...string) string {
	t.Helper()
	msg := mustFail(t, res)
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
	if strings.Contains(res.LogText(), "Initializing terraform") {
		t.Errorf("terraform init ran; want the job to fail before it:\n%s", res.LogText())
	}
	return msg
}

// stateOutputs decodes the outputs of a terraform state.
func stateOutputs(t *testing.T, state []byte) map[string]json.RawMessage {
	t.Helper()
	var st struct {
		Outputs map[string]struct {
			Value json.RawMessage `json:"value"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(state, &st); err != nil {
		t.Fatalf("decode state: %v", err)
	}
	out := map[string]json.RawMessage{}
	for k, v := range st.Outputs {
		out[k] = v.Value
	}
	return out
}

func terraformPath(t *testing.T) string {
	t.Helper()
	testtier.Heavy(t, "runs terraform")
	p, err := terraform.Find(context.Background(), terraform.Options{})
	if err != nil {
		t.Fatalf("the tests need terraform %s on the PATH (make test installs nothing for it: it is part of the machine): %v", terraform.DefaultVersion, err)
	}
	return p
}

// coderTF starts a template that requires the official provider.
const coderTF = `terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
`

// useUp uses up one of the failures still to answer (*left, under f.mu):
// true when this request is one of them.
func useUp(left *int) bool {
	if *left == 0 {
		return false
	}
	*left--
	return true
}
