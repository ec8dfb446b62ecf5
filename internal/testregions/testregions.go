// Package testregions builds two network "regions" for tests of what a
// wide-area link does to the product (workspace proxies, issue 34): two
// network namespaces, A and B, each with its loopback up, joined by a
// point-to-point link with a fixed one-way delay. Processes run in a
// region through Region.Command (nsenter into its network namespace only),
// and the test process itself dials and listens in a region with
// Region.Dial and Region.Listen.
//
// The link is not a veth pair shaped by `tc qdisc … netem`: kernels built
// without sch_netem (CONFIG_NET_SCH_NETEM, as the test machines' kernel)
// have no way to delay packets in tc (sch_fq, for an eBPF departure-time
// delay, is missing there too). It is two TUN devices, one in each
// namespace (10.77.0.1/24 in A, 10.77.0.2/24 in B), and the test process
// moves every IP packet from one to the other after the delay, in order,
// dropping none unless more than a queue's worth (4096 packets) is in
// flight. What a process in a region sees is what a delayed veth pair
// would give it: an interface, an address, a route, a round trip of twice
// the delay (plus well under a millisecond for the copy) across, and
// loopback's within.
//
// It needs root (namespaces, /dev/net/tun) and the ip command (iproute2).
// It is for tests only.
package testregions

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airgapcoder/internal/testtier"
)

// Addresses of the link's two ends.
const (
	AddrA = "10.77.0.1"
	AddrB = "10.77.0.2"
)

// Options configure New.
type Options struct {
	// Prefix starts the namespaces' names, which end in "-a-PID" and
	// "-b-PID" (PID: the test process's). Empty means "regions".
	Prefix string
	// Delay is the link's one-way delay; the round trip across is twice
	// it. Zero means none (the copy's own fraction of a millisecond).
	Delay time.Duration
}

// Regions are the two namespaces and the link between them. New removes
// them when the test ends.
type Regions struct {
	// A and B are the two regions.
	A, B *Region
	// Delay is the link's one-way delay.
	Delay time.Duration

	wg      sync.WaitGroup
	closers []func()
}

// Region is one network namespace of Regions.
type Region struct {
	// Name is the namespace's name (`ip netns`), its path
	// /run/netns/<Name>.
	Name string
	// Addr is its address on the link.
	Addr string
}

// New creates the two regions and starts the link; t's cleanup stops the
// link and deletes the namespaces. It fails the test, saying which step
// failed, when any of it cannot be set up.
func New(t testing.TB, opts Options) *Regions {
	t.Helper()
	testtier.Heavy(t, "creates network namespaces")
	if opts.Prefix == "" {
		opts.Prefix = "regions"
	}
	pid := os.Getpid()
	r := &Regions{
		A:     &Region{Name: fmt.Sprintf("%s-a-%d", opts.Prefix, pid), Addr: AddrA},
		B:     &Region{Name: fmt.Sprintf("%s-b-%d", opts.Prefix, pid), Addr: AddrB},
		Delay: opts.Delay,
	}
	t.Cleanup(r.close)
	for _, reg := range []*Region{r.A, r.B} {
		if err := ip("netns", "add", reg.Name); err != nil {
			t.Fatalf("create region %s: %v", reg.Name, err)
		}
		r.closers = append(r.closers, func() { _ = ip("netns", "del", reg.Name) })
		if err := ip("-n", reg.Name, "link", "set", "lo", "up"); err != nil {
			t.Fatalf("region %s: loopback up: %v", reg.Name, err)
		}
	}
	tunA, err := r.A.openTUN("wan0")
	if err != nil {
		t.Fatalf("region %s: %v", r.A.Name, err)
	}
	tunB, err := r.B.openTUN("wan0")
	if err != nil {
		tunA.Close()
		t.Fatalf("region %s: %v", r.B.Name, err)
	}
	r.closers = append(r.closers, func() { tunA.Close(); tunB.Close() })
	for _, reg := range []*Region{r.A, r.B} {
		for _, args := range [][]string{
			{"link", "set", "wan0", "mtu", "1500", "up"},
			{"addr", "add", reg.Addr + "/24", "dev", "wan0"},
		} {
			if err := ip(append([]string{"-n", reg.Name}, args...)...); err != nil {
				t.Fatalf("region %s: %v", reg.Name, err)
			}
		}
	}
	r.forward(tunA, tunB)
	r.forward(tunB, tunA)
	return r
}

// close stops the link and deletes the namespaces (in reverse order of
// their creation).
func (r *Regions) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
	r.wg.Wait()
}

// queueLen is how many packets may be in flight on one direction of the
// link; more are dropped, as a full link drops them.
const queueLen = 4096

// forward copies every packet read from from to to, Delay after it was
// read, in order, until from is closed.
func (r *Regions) forward(from, to *os.File) {
	type packet struct {
		due time.Time
		b   []byte
	}
	q := make(chan packet, queueLen)
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		defer close(q)
		buf := make([]byte, 65536)
		for {
			n, err := from.Read(buf)
			if err != nil {
				return // closed
			}
			p := packet{due: time.Now().Add(r.Delay), b: append([]byte(nil), buf[:n]...)}
			select {
			case q <- p:
			default: // a full link drops
			}
		}
	}()
	go func() {
		defer r.wg.Done()
		timer := time.NewTimer(0)
		<-timer.C
		for p := range q {
			if d := time.Until(p.due); d > 0 {
				timer.Reset(d)
				<-timer.C
			}
			_, _ = to.Write(p.b) // a write after close, or to a down link, drops the packet
		}
	}()
}

// Command returns a command that runs args in the region's network
// namespace (nsenter --net: the mounts stay the host's, see e2e's inNetns),
// with the test process's environment plus env.
func (reg *Region) Command(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + reg.Name, "--"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// CommandContext is Command with a context that kills the process.
func (reg *Region) CommandContext(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + reg.Name, "--"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// Dial connects from the region to address: the socket is made in the
// region's namespace, and the connection is the test process's to use
// from any goroutine.
func (reg *Region) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := reg.do(func() error {
		var err error
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Listen listens in the region, as net.Listen does.
func (reg *Region) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := reg.do(func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// openTUN creates the TUN device name in the region and returns it, ready
// to read and write IP packets (no packet information header).
func (reg *Region) openTUN(name string) (*os.File, error) {
	var f *os.File
	err := reg.do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("tun %s: %w", name, err)
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("create tun %s: %w", name, err)
		}
		f = os.NewFile(uintptr(fd), "/dev/net/tun:"+name)
		return nil
	})
	return f, err
}

// do runs fn on an OS thread that has entered the region's network
// namespace. Sockets and TUN devices belong to the namespace they were
// made in, so what fn makes stays in the region when used from other
// threads. The thread is never handed back to the Go scheduler: it ends
// with its goroutine, and its namespace with it.
func (reg *Region) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no Unlock: the thread exits with the goroutine
		ns, err := os.Open("/run/netns/" + reg.Name)
		if err != nil {
			errc <- fmt.Errorf("open namespace %s: %w", reg.Name, err)
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter namespace %s: %w", reg.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// RoundTrip measures n TCP round trips of one byte from the region from to
// a listener in to (across the link, or within one region when from and to
// are the same), on one connection, and returns their median.
func RoundTrip(ctx context.Context, from, to *Region, n int) (time.Duration, error) {
	l, err := to.Listen("tcp", to.Addr+":0")
	if err != nil {
		return 0, fmt.Errorf("listen in %s: %w", to.Name, err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		for {
			if _, err := c.Read(b); err != nil {
				return
			}
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}()
	c, err := from.Dial(ctx, "tcp", l.Addr().String())
	if err != nil {
		return 0, fmt.Errorf("dial %s from %s: %w", l.Addr(), from.Name, err)
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	rtts := make([]time.Duration, 0, n)
	b := []byte{'x'}
	for range n {
		start := time.Now()
		if _, err := c.Write(b); err != nil {
			return 0, fmt.Errorf("round trip to %s: %w", l.Addr(), err)
		}
		if _, err := c.Read(b); err != nil {
			return 0, fmt.Errorf("round trip to %s: %w", l.Addr(), err)
		}
		rtts = append(rtts, time.Since(start))
	}
	return Median(rtts), nil
}

// Median returns the median of ds (0 for none); ds is sorted in place.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
