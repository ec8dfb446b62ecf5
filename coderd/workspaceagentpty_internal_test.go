package coderd

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// TestWritePTYRequest: a browser message of any size becomes frames the
// agent can read, its data cut only between characters, the resize last.
func TestWritePTYRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  codersdk.ReconnectingPTYRequest
	}{
		{"Empty", codersdk.ReconnectingPTYRequest{}},
		{"ResizeOnly", codersdk.ReconnectingPTYRequest{Height: 40, Width: 120}},
		{"Keys", codersdk.ReconnectingPTYRequest{Data: "ls -l\r"}},
		{"LargePaste", codersdk.ReconnectingPTYRequest{Data: strings.Repeat("é€😀x", 5000), Width: 90, Height: 30}},
		{"ControlCharacters", codersdk.ReconnectingPTYRequest{Data: strings.Repeat("\x01<&>", 10000)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			n, err := writePTYRequest(&b, tc.req)
			if err != nil {
				t.Fatalf("writePTYRequest: %v", err)
			}
			if n != int64(b.Len()) {
				t.Errorf("got %d bytes counted, want %d written", n, b.Len())
			}
			var data strings.Builder
			var last codersdk.ReconnectingPTYRequest
			frames := 0
			for {
				var f codersdk.ReconnectingPTYRequest
				err := relayconn.ReadFrame(&b, &f)
				if err != nil {
					if !errors.Is(err, io.EOF) {
						t.Fatalf("frame %d: %v", frames, err)
					}
					break
				}
				if frames > 0 && (last.Width != 0 || last.Height != 0) {
					t.Errorf("frame %d follows a resize; want the resize in the last frame", frames)
				}
				data.WriteString(f.Data)
				last = f
				frames++
			}
			if data.String() != tc.req.Data {
				t.Errorf("got data of %d bytes, want the %d sent", data.Len(), len(tc.req.Data))
			}
			if last.Width != tc.req.Width || last.Height != tc.req.Height {
				t.Errorf("got size %dx%d in the last frame, want %dx%d", last.Width, last.Height, tc.req.Width, tc.req.Height)
			}
		})
	}
}
