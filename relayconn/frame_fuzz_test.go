package relayconn_test

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
	"testing/iotest"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// countingReader counts the bytes read through it, one at a time when
// slow, so a reader that reads ahead is caught either way.
type countingReader struct {
	r    *bytes.Reader
	n    int
	slow bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.slow && len(p) > 1 {
		p = p[:1]
	}
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func relayFrame(tb testing.TB, v any) []byte {
	tb.Helper()
	var b bytes.Buffer
	if err := relayconn.WriteFrame(&b, v); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// FuzzReadFrame checks the header that opens every relayed stream,
// which an agent reads from coderd and coderd from an agent.
//
// Properties: no panic, and memory bounded by relayconn.MaxFrame whatever the
// length prefix says; the reader consumes the 2-byte length and exactly the
// frame it announces, never a byte of the stream behind it (it consumes
// only the prefix when the length is over the limit); a frame that decodes
// encodes (relayconn.WriteFrame) to a frame that decodes to the same value, and
// re-encodes to the same bytes.
func FuzzReadFrame(f *testing.F) {
	f.Add(relayFrame(f, codersdk.RelayHeader{Kind: codersdk.RelayKindSSH, ConnID: "3f1c6f1e", User: "alice"}), []byte("SSH-2.0-Go\r\n"), false)
	f.Add(relayFrame(f, codersdk.RelayHeader{Kind: codersdk.RelayKindTCP, Host: "db.internal", Port: 5432, ConnID: "c1"}), []byte("\x00\x01"), true)
	f.Add(relayFrame(f, codersdk.RelayHeader{Kind: codersdk.RelayKindTCP, Port: 8080}), []byte{}, false)
	f.Add(relayFrame(f, codersdk.RelayReply{}), []byte("payload"), false)
	f.Add(relayFrame(f, codersdk.RelayReply{Error: "dial tcp 127.0.0.1:5432: connection refused"}), []byte{}, true)
	// Broken: no length, half a length, a frame cut short, over the limit,
	// not JSON, a port out of range, JSON followed by more JSON.
	f.Add([]byte{}, []byte{}, false)
	f.Add([]byte{0}, []byte{}, false)
	f.Add([]byte{0, 10, '{'}, []byte{}, false)
	f.Add([]byte{0xff, 0xff}, []byte("{}"), false)
	f.Add([]byte{0, 3, 'x', 'y', 'z'}, []byte{}, false)
	f.Add([]byte("\x00\x0c{\"port\":1e9}"), []byte{}, false)
	f.Add([]byte("\x00\x04{}{}"), []byte{}, false)

	f.Fuzz(func(t *testing.T, frame, rest []byte, slow bool) {
		if len(frame) > 2+relayconn.MaxFrame+16 || len(rest) > 1024 {
			t.Skip("input over the size cap")
		}
		stream := append(bytes.Clone(frame), rest...)
		size := -1
		if len(stream) >= 2 {
			size = int(binary.BigEndian.Uint16(stream))
		}
		for _, v := range []any{&codersdk.RelayHeader{}, &codersdk.RelayReply{}} {
			r := &countingReader{r: bytes.NewReader(stream), slow: slow}
			err := relayconn.ReadFrame(r, v)
			switch {
			case size < 0:
				if err == nil {
					t.Fatalf("%T: read a frame from %d bytes", v, len(stream))
				}
			case size > relayconn.MaxFrame:
				if err == nil || r.n != 2 {
					t.Fatalf("%T: length %d over the limit: err %v after %d bytes, want an error after 2", v, size, err, r.n)
				}
			case r.n > 2+size:
				t.Fatalf("%T: read %d bytes of a %d-byte frame: the stream behind it is lost", v, r.n, 2+size)
			case err == nil && r.n != 2+size:
				t.Fatalf("%T: decoded after %d bytes of a %d-byte frame", v, r.n, 2+size)
			}
			if err != nil {
				continue
			}
			// Round trip: what decoded encodes, and decodes the same.
			enc := relayFrame(t, v)
			again := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if err := relayconn.ReadFrame(iotest.OneByteReader(bytes.NewReader(enc)), again); err != nil {
				t.Fatalf("%T %+v: its own frame %q does not decode: %v", v, v, enc, err)
			}
			if !reflect.DeepEqual(v, again) {
				t.Fatalf("decoded %+v; encoded and decoded again %+v", v, again)
			}
			if enc2 := relayFrame(t, again); !bytes.Equal(enc, enc2) {
				t.Fatalf("%T: frame %q re-encodes as %q", v, enc, enc2)
			}
		}
	})
}
