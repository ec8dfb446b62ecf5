//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package cli

import (
	"errors"
	"os"
)

// On this platform coder ssh runs commands and shells without a terminal.

func isTerminal(f *os.File) bool { return false }

func terminalSize(f *os.File) (cols, rows int, err error) {
	return 0, 0, errors.New("terminal size unsupported on this platform")
}

func makeRaw(f *os.File) (func(), error) {
	return nil, errors.New("raw terminal mode unsupported on this platform")
}

func watchWindowSize(f *os.File, fn func(cols, rows int)) (stop func()) { return func() {} }
