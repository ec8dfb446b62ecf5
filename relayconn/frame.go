package relayconn

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// A frame opens a relayed stream or connection before its bytes flow: a
// big-endian uint16 length and that many bytes of JSON. What the JSON holds
// (codersdk's RelayHeader, RelayReply, RelayTarget, RelayTargetReply, the
// web terminal's requests, coderd's peer requests) is its sender's
// business; this package only frames it. A reader consumes the frame and
// no byte more, so the stream's own bytes can follow it at once.

// MaxFrame caps a frame's JSON.
const MaxFrame = 16 << 10

// WriteFrame writes v as a big-endian uint16 length and that many bytes of
// JSON, in one write.
func WriteFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("relay frame of %d bytes is over the %d byte limit", len(b), MaxFrame)
	}
	buf := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(buf, uint16(len(b)))
	copy(buf[2:], b)
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads what WriteFrame wrote, and no byte more.
func ReadFrame(r io.Reader, v any) error {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return fmt.Errorf("read relay frame length: %w", err)
	}
	size := int(binary.BigEndian.Uint16(n[:]))
	if size > MaxFrame {
		return fmt.Errorf("relay frame of %d bytes is over the %d byte limit", size, MaxFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("read relay frame: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode relay frame: %w", err)
	}
	return nil
}
