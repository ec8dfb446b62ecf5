// Package connecttrace reads the connect() calls that `strace -f -e
// trace=connect -o FILE` recorded and says which of them left the machine:
// how the tests prove that nothing reached beyond loopback, DNS included.
// It only reads files.
package connecttrace

import (
	"bufio"
	"os"
	"regexp"
	"strings"
)

// Report is what a trace holds.
type Report struct {
	// Total counts every connect() of an address family (unix sockets
	// included).
	Total int
	// Offenders are the trace lines of connect() calls to an IPv4 or IPv6
	// address outside loopback.
	Offenders []string
}

var (
	inet  = regexp.MustCompile(`inet_addr\("([^"]+)"\)`)
	inet6 = regexp.MustCompile(`inet_pton\(AF_INET6, "([^"]+)"`)
)

// Read reads the trace files.
func Read(paths ...string) (Report, error) {
	var r Report
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return r, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, "connect(") || !strings.Contains(line, "sa_family=") {
				continue
			}
			r.Total++
			var addr string
			switch {
			case strings.Contains(line, "sa_family=AF_INET6"):
				if m := inet6.FindStringSubmatch(line); m != nil {
					addr = m[1]
				}
			case strings.Contains(line, "sa_family=AF_INET"):
				if m := inet.FindStringSubmatch(line); m != nil {
					addr = m[1]
				}
			default: // AF_UNIX, AF_NETLINK, AF_UNSPEC: not a network connection
				continue
			}
			if !strings.HasPrefix(addr, "127.") && addr != "::1" && addr != "::ffff:127.0.0.1" {
				r.Offenders = append(r.Offenders, line)
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return r, err
		}
	}
	return r, nil
}
