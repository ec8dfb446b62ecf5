package coderdtest

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"airgapcoder/codersdk"
)

// CreateWorkspaceWithAgent creates a workspace called name for user (a
// template of the same name comes first, created by admin) whose build d
// completes with one resource carrying agent. Give agent a Token (a UUID)
// and run an agent with it to connect.
func CreateWorkspaceWithAgent(t testing.TB, admin, user *codersdk.Client, d *Daemon, name string, agent codersdk.ProvisionedAgent) codersdk.Workspace {
	t.Helper()
	ctx := context.Background()
	tpl := CreateTemplate(t, admin, d, name, MinimalTemplate, nil)
	w, err := user.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: name})
	if err != nil {
		t.Fatalf("create workspace %s: %v", name, err)
	}
	j := d.Acquire(t, 20*time.Second)
	if j == nil {
		t.Fatalf("the build of workspace %s reached no daemon within 20s", name)
	}
	if agent.Name == "" {
		agent.Name = "main"
	}
	if agent.OperatingSystem == "" {
		agent.OperatingSystem = "linux"
	}
	if agent.Architecture == "" {
		agent.Architecture = "amd64"
	}
	d.Complete(t, j.JobID, codersdk.CompleteJobRequest{
		State:     []byte(`{"build":1}`),
		Resources: []codersdk.ProvisionedResource{{Type: "terraform_data", Name: "workspace", Agents: []codersdk.ProvisionedAgent{agent}}},
	})
	w, err = user.Workspace(ctx, w.ID)
	if err != nil {
		t.Fatalf("get workspace %s: %v", name, err)
	}
	return w
}

// WorkspaceAgent returns the first agent of the workspace's latest build.
func WorkspaceAgent(t testing.TB, w codersdk.Workspace) codersdk.WorkspaceAgent {
	t.Helper()
	for _, r := range w.LatestBuild.Resources {
		for _, a := range r.Agents {
			return a
		}
	}
	t.Fatalf("workspace %s has no agent", w.Name)
	return codersdk.WorkspaceAgent{}
}

// EchoServer listens on loopback until the test ends and echoes every
// connection's bytes back: a service inside a workspace for relay tests
// and benchmarks. It returns the port.
func EchoServer(t testing.TB) int {
	t.Helper()
	return BannerEchoServer(t, "")
}

// BannerEchoServer is an EchoServer that first writes banner to every
// connection it accepts, as servers that speak first do (SSH, SMTP).
func BannerEchoServer(t testing.TB, banner string) int {
	t.Helper()
	return ServeTCP(t, func(c net.Conn) {
		if _, err := io.WriteString(c, banner); err == nil {
			_, _ = io.Copy(c, c)
		}
	})
}

// ServeTCP listens on a loopback port until the test ends and runs serve
// on a goroutine of its own for every connection, closing the connection
// when serve returns. It returns the port. When the test ends, the
// connections still open are closed and ServeTCP's goroutines waited for:
// serve must return once its connection is closed.
func ServeTCP(t testing.TB, serve func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		open   = map[net.Conn]struct{}{}
		closed bool
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		closed = true
		for c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				_ = c.Close()
				return
			}
			open[c] = struct{}{}
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					_ = c.Close()
				}()
				serve(c)
			})
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}
