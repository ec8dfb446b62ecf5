//go:build !linux

package postgres

import "context"

// RunHelperIfRequested does nothing on this operating system: the built-in
// server runs on Linux only.
func RunHelperIfRequested() {}

func (s *Server) start(context.Context) error { return ErrUnsupported }

func (s *Server) stop(context.Context) error { return nil }

func ping(context.Context, string) error { return ErrUnsupported }

func killProcess(int) error { return ErrUnsupported }
