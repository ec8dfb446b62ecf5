package coderd_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/bodydeadline/bodydeadlinetest"
)

// slowBody sends head to addr over a plain TCP connection, its body a byte
// a second (bodydeadlinetest.SlowBody).
func slowBody(t *testing.T, addr, head string, limit time.Duration) (time.Duration, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return bodydeadlinetest.SlowBody(t, conn, head, limit)
}

// TestBodyDeadline: a client that sends a body a byte a second is cut off
// within the body deadline (plus slack) on every kind of route: the API's
// JSON routes, signed in or not, an upload without a session, the
// dashboard's forms, dev URLs and routes that do not exist.
func TestBodyDeadline(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	const slack = 4 * time.Second
	d := coderdtest.New(t, coderdtest.Options{BodyReadTimeout: deadline})
	owner, _ := d.CreateFirstUser(t)
	host := d.URL.Host
	for _, tc := range []struct {
		name, head string
		// answer is the status line the server answers, "" for any (or
		// none: the connection cut).
		answer string
	}{
		{"API login", "POST /api/v2/users/login HTTP/1.1\nHost: " + host + "\nContent-Type: application/json\nContent-Length: 100\n", "HTTP/1.1 408"},
		{"API, signed in", "POST /api/v2/users HTTP/1.1\nHost: " + host + "\nContent-Type: application/json\n" +
			codersdk.SessionTokenHeader + ": " + owner.SessionToken + "\nContent-Length: 100\n", "HTTP/1.1 408"},
		{"upload without a session", "POST /api/v2/files HTTP/1.1\nHost: " + host + "\nContent-Type: " + codersdk.ContentTypeTar + "\nContent-Length: 100\n", ""},
		{"dashboard sign-in form", "POST /login HTTP/1.1\nHost: " + host + "\nOrigin: " + d.URL.String() +
			"\nContent-Type: application/x-www-form-urlencoded\nContent-Length: 100\n", "HTTP/1.1 408"},
		{"dev URL", "POST /@admin/dev/apps/web/ HTTP/1.1\nHost: " + host + "\nContent-Length: 100\n", ""},
		{"no such route", "POST /api/v2/nothing-here HTTP/1.1\nHost: " + host + "\nContent-Length: 100\n", ""},
		{"chunked", "POST /api/v2/users/login HTTP/1.1\nHost: " + host + "\nContent-Type: application/json\nTransfer-Encoding: chunked\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			took, got := slowBody(t, host, tc.head, deadline+slack)
			if took > deadline+slack {
				t.Errorf("cut after %s, want within %s + %s", took, deadline, slack)
			}
			if !strings.HasPrefix(got, tc.answer) {
				t.Errorf("answer: got %q, want it to start with %q", got, tc.answer)
			}
		})
	}
}

// TestBodyDeadlineLiftedForUploads: a signed-in user's template upload may
// take longer than the body deadline (it is lifted once the request is
// authenticated), and a long-poll outlasts it, with a body or without.
func TestBodyDeadlineLiftedForUploads(t *testing.T) {
	t.Parallel()
	const deadline = 500 * time.Millisecond
	const psk = "deadline-psk"
	d := coderdtest.New(t, coderdtest.Options{BodyReadTimeout: deadline, ProvisionerPSK: psk})
	owner, _ := d.CreateFirstUser(t)

	tarball := coderdtest.TemplateTar(t, coderdtest.MinimalTemplate)
	third := len(tarball) / 3
	body := &slowReader{pieces: [][]byte{tarball[:third], tarball[third : 2*third], tarball[2*third:]}, pause: deadline}
	req, err := http.NewRequest(http.MethodPost, d.URL.String()+"/api/v2/files", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(tarball))
	req.Header.Set("Content-Type", codersdk.ContentTypeTar)
	req.Header.Set(codersdk.SessionTokenHeader, owner.SessionToken)
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("an upload sent over %s: got %d %s, want 201", time.Since(start).Round(time.Millisecond), res.StatusCode, answer)
	}

	daemon := d.NewDaemon(t, "waits", nil)
	for _, withBody := range []bool{false, true} {
		var body io.Reader
		if withBody {
			body = strings.NewReader("{}")
		}
		req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/api/v2/provisionerdaemons/%s/acquire?wait=%s", d.URL, daemon.ID, 3*deadline), body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(codersdk.ProvisionerDaemonPSKHeader, psk)
		start := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("acquire (body %v): %v", withBody, err)
		}
		res.Body.Close()
		if took := time.Since(start); res.StatusCode != http.StatusNoContent || took < 3*deadline {
			t.Errorf("acquire (body %v): got %d after %s, want 204 after its %s long-poll", withBody, res.StatusCode, took, 3*deadline)
		}
	}
}

// slowReader hands out its pieces with a pause before each but the first:
// a client slower than the body deadline.
type slowReader struct {
	pieces [][]byte
	pause  time.Duration
	sent   int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if len(r.pieces) == 0 {
		return 0, io.EOF
	}
	if r.sent > 0 {
		time.Sleep(r.pause) // paces the client: the slow client under test, not a wait for the server
	}
	n := copy(p, r.pieces[0])
	if r.pieces[0] = r.pieces[0][n:]; len(r.pieces[0]) == 0 {
		r.pieces = r.pieces[1:]
		r.sent++
	}
	return n, nil
}
