package relayconn_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"airgapcoder/relayconn"
)

// unevenReader returns data in reads of varied sizes, small and bulk, then
// err (io.EOF for a clean end).
type unevenReader struct {
	data []byte
	rng  *rand.Rand
	err  error
}

func (r *unevenReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := 1 + r.rng.IntN(min(len(p), 200<<10))
	n = copy(p, r.data[:min(n, len(r.data))])
	r.data = r.data[n:]
	return n, nil
}

// TestCopyPipelined: every byte arrives, in order, whatever the sizes of
// the reads; the end of src is a nil error and a failed read is returned.
func TestCopyPipelined(t *testing.T) {
	t.Parallel()
	data := make([]byte, 9<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	var got bytes.Buffer
	n, err := relayconn.CopyPipelined(&got, &unevenReader{data: data, rng: rng, err: io.EOF})
	if err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("copied %d of %d bytes, err %v, equal %v", n, len(data), err, bytes.Equal(got.Bytes(), data))
	}
	broken := errors.New("connection reset")
	got.Reset()
	n, err = relayconn.CopyPipelined(&got, &unevenReader{data: data[:1<<20], rng: rng, err: broken})
	if !errors.Is(err, broken) || n != 1<<20 {
		t.Fatalf("after a failed read: %d bytes, err %v; want all 1 MiB and the read's error", n, err)
	}
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("peer gone") }

// TestCopyPipelinedWriteFails: a failed write ends the copy at once with its
// error, while the read ahead waits on a connection that sends nothing more;
// closing that connection, as a relay closes both sides, ends the reading.
func TestCopyPipelinedWriteFails(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	go b.Write(make([]byte, 1000)) // one chunk, then nothing
	res := make(chan error, 1)
	go func() {
		_, err := relayconn.CopyPipelined(failingWriter{}, a)
		res <- err
	}()
	select {
	case err := <-res:
		if err == nil || err.Error() != "peer gone" {
			t.Fatalf("got %v, want the write's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a failed write did not end the copy")
	}
	a.Close()
	b.Close()
}

// sizeRecorder serves reads of the given sizes (0: fill p) and records
// how large each read's buffer was.
type sizeRecorder struct {
	sizes []int
	seen  []int
}

func (r *sizeRecorder) Read(p []byte) (int, error) {
	if len(r.sizes) == 0 {
		return 0, io.EOF
	}
	r.seen = append(r.seen, len(p))
	n := r.sizes[0]
	r.sizes = r.sizes[1:]
	if n == 0 || n > len(p) {
		n = len(p)
	}
	return n, nil
}

// TestCopyIdleBuffer: a relay copy waits with a small buffer (8 KiB), so
// that an idle or interactive connection does not hold 256 KiB on each
// hop; the first read that fills it moves the copy to large buffers.
func TestCopyIdleBuffer(t *testing.T) {
	t.Parallel()
	for name, copyFn := range map[string]func(io.Writer, io.Reader) (int64, error){
		"CopyBuffered": relayconn.CopyBuffered, "CopyPipelined": relayconn.CopyPipelined,
	} {
		t.Run(name, func(t *testing.T) {
			r := &sizeRecorder{sizes: []int{10, 300, 5000, 0, 0, 0, 100}}
			if _, err := copyFn(io.Discard, r); err != nil {
				t.Fatal(err)
			}
			want := []int{8 << 10, 8 << 10, 8 << 10, 8 << 10, 256 << 10, 256 << 10, 256 << 10}
			if fmt.Sprint(r.seen) != fmt.Sprint(want) {
				t.Errorf("read buffers %v, want %v: small while reads are small, large after one fills it", r.seen, want)
			}
		})
	}
}
