//go:build unix

package templatetar

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPackRejectsUnixOnly covers folder contents only Unix can create.
func TestPackRejectsUnixOnly(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		want    error
		wantMsg string
	}{
		{
			name: "fifo",
			setup: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
					t.Skipf("mkfifo: %v", err)
				}
			},
			want:    ErrUnsupportedType,
			wantMsg: `"pipe" is a FIFO`,
		},
		{
			name: "backslash in a name",
			setup: func(t *testing.T, dir string) {
				writeTree(t, dir, map[string]string{`win\path.tf`: "x"})
			},
			want:    ErrUnsafePath,
			wantMsg: `"win\\path.tf": contains a backslash`,
		},
		{
			name: "newline in a name",
			setup: func(t *testing.T, dir string) {
				writeTree(t, dir, map[string]string{"two\nlines.tf": "x"})
			},
			want:    ErrUnsafePath,
			wantMsg: `"two\nlines.tf": contains a control character`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			writeTree(t, src, map[string]string{"main.tf": "m"})
			tc.setup(t, src)
			err := Pack(src, io.Discard, 0)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Pack error = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("Pack error = %q, want it to contain %s", err, tc.wantMsg)
			}
		})
	}
}
