// Package egress owns the appliance's egress guard: a dialer that refuses
// destinations outside an allow list and logs each refusal, and the glue
// that puts it under the product's outbound HTTP clients.
//
// The allow list holds host names (exact, case-insensitive, or "*.suffix"
// for any name below suffix), IP addresses and CIDR prefixes. Loopback
// (127.0.0.0/8, ::1, "localhost") and the unspecified addresses (dialing
// 0.0.0.0 or :: reaches this host) are always allowed, and so are unix
// sockets.
//
// The guard must not resolve names to decide: a name that is not in the
// list is refused before any DNS query or packet leaves the machine. A name
// that is in the list is dialed normally, so whatever it resolves to is
// trusted; the list is a statement about names, not about the addresses
// behind them.
//
// It guards HTTP clients only (the dialer of an http.Transport). Programs
// that open their own sockets, such as a PostgreSQL driver or a terraform
// subprocess, are outside it.
package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// RefusedError is returned by DialContext for a destination outside the
// allow list.
type RefusedError struct {
	// Addr is the refused destination as host:port.
	Addr string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("egress: connection to %s refused: not in the appliance's allow list (appliance.yaml egress-allow)", e.Addr)
}

// Guard decides which destinations outbound connections may reach. Build it
// with New; it is safe for concurrent use.
type Guard struct {
	names    map[string]bool // exact host names, lower case, no trailing dot
	suffixes []string        // from "*.example.com": ".example.com"
	addrs    map[netip.Addr]bool
	prefixes []netip.Prefix
	log      *slog.Logger
	// refused counts refusals; onRefuse, when set, hears each one.
	refused  atomic.Int64
	onRefuse func(addr string, total int64)
	// dial makes an allowed connection; tests replace it.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// New returns a guard allowing loopback plus allow. Each entry is a host
// name, "*." followed by a host name, an IP address, or a CIDR prefix such
// as 10.0.0.0/8. A nil log means slog.Default(). New starts nothing.
func New(allow []string, log *slog.Logger) (*Guard, error) {
	if log == nil {
		log = slog.Default()
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	g := &Guard{
		names: map[string]bool{"localhost": true},
		addrs: map[netip.Addr]bool{},
		log:   log,
		dial:  d.DialContext,
	}
	for _, entry := range allow {
		if err := g.add(strings.TrimSpace(entry)); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (g *Guard) add(entry string) error {
	if a, err := netip.ParseAddr(entry); err == nil {
		g.addrs[a.WithZone("").Unmap()] = true
		return nil
	}
	if strings.Contains(entry, "/") {
		p, err := netip.ParsePrefix(entry)
		if err != nil {
			return fmt.Errorf("egress: allow entry %q: not a CIDR prefix like 10.0.0.0/8", entry)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		g.prefixes = append(g.prefixes, p.Masked())
		return nil
	}
	name := normalize(entry)
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		if !validName(rest) {
			return fmt.Errorf("egress: allow entry %q: not a host name, IP or CIDR", entry)
		}
		g.suffixes = append(g.suffixes, "."+rest)
		return nil
	}
	if !validName(name) {
		return fmt.Errorf("egress: allow entry %q: not a host name, IP or CIDR", entry)
	}
	g.names[name] = true
	return nil
}

func normalize(host string) string {
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// validName accepts DNS names loosely (letters, digits, '-', '_', dots
// between non-empty labels); it rejects ports, schemes and paths.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// Allowed reports whether host (a name or an IP literal, without port) is
// in the allow list. It never resolves names.
func (g *Guard) Allowed(host string) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.WithZone("").Unmap()
		if a.IsLoopback() || a.IsUnspecified() || g.addrs[a] {
			return true
		}
		for _, p := range g.prefixes {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	name := normalize(host)
	if g.names[name] {
		return true
	}
	for _, s := range g.suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// DialContext dials addr if its host is allowed; otherwise it logs the
// attempt and returns a *RefusedError without sending anything. Unix
// sockets are always allowed.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "unix", "unixgram", "unixpacket":
		return g.dial(ctx, network, addr)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if !g.Allowed(host) {
		n := g.refused.Add(1)
		g.log.WarnContext(ctx, "egress refused", "addr", addr, "network", network, "refused_total", n)
		if g.onRefuse != nil {
			g.onRefuse(addr, n)
		}
		return nil, &RefusedError{Addr: addr}
	}
	return g.dial(ctx, network, addr)
}

// OnRefuse makes fn hear every refusal, with the count so far. Call it
// before the guard is in use.
func (g *Guard) OnRefuse(fn func(addr string, total int64)) { g.onRefuse = fn }

// Refused is how many connections the guard has refused.
func (g *Guard) Refused() int64 { return g.refused.Load() }

// Wrap returns a clone of t that dials through the guard. The proxy is
// cleared so the guard judges the real destination, and custom TLS dialers
// are dropped so every connection goes through DialContext.
func (g *Guard) Wrap(t *http.Transport) *http.Transport {
	c := t.Clone()
	c.Proxy = nil
	c.Dial = nil //nolint:staticcheck // cleared so it cannot bypass the guard
	c.DialTLS = nil
	c.DialTLSContext = nil
	c.DialContext = g.DialContext
	return c
}

// Install puts the guard under http.DefaultTransport (and so
// http.DefaultClient and every client that clones the default transport
// afterwards). Call it once, early, before any client is in use; callers
// that need the old transport back (tests) save and restore
// http.DefaultTransport themselves.
func (g *Guard) Install() {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		t = &http.Transport{}
	}
	http.DefaultTransport = g.Wrap(t)
}
