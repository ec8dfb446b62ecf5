package bench

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"airgapcoder/certs"
	"airgapcoder/internal/testhaproxy"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testwait"
)

// haproxyChain starts three HAProxy processes in a chain in front of target
// (TCP mode, one thread each) and returns the first one's port: a relay
// with as many user-space hops as `coder port-forward` has (CLI, coderd,
// agent), written in C for nothing else and doing nothing else (no
// multiplexing, no authentication, no audit). With tls, each hop speaks TLS
// to the next, verified against a CA, so a relayed byte is encrypted and
// decrypted twice, as it is on the relay over HTTPS. The benchmarks report
// it beside the relay: it is what a three-hop relay costs on this machine.
func haproxyChain(b *testing.B, target int, tls bool) int {
	b.Helper()
	dir := b.TempDir()
	var bindTLS, serverTLS string
	if tls {
		if _, err := certs.Generate(dir, []string{"127.0.0.1"}, certs.Options{}); err != nil {
			b.Fatal(err)
		}
		cdir := certs.CertsDir(dir)
		crt, err := os.ReadFile(filepath.Join(cdir, certs.ServerFile))
		if err != nil {
			b.Fatal(err)
		}
		key, err := os.ReadFile(filepath.Join(cdir, certs.ServerKeyFile))
		if err != nil {
			b.Fatal(err)
		}
		pair := filepath.Join(dir, "server+key.pem")
		if err := os.WriteFile(pair, append(crt, key...), 0o600); err != nil {
			b.Fatal(err)
		}
		bindTLS = " ssl crt " + pair
		serverTLS = " ssl verify required ca-file " + filepath.Join(cdir, certs.CAFile)
	}
	next := target
	for hop := 3; hop >= 1; hop-- {
		listen := testport.Port(b)
		var bind, server string
		if hop > 1 {
			bind = bindTLS // the hop before speaks TLS to this one
		}
		if hop < 3 {
			server = serverTLS
		}
		cfg := fmt.Sprintf(`global
  nbthread 1
defaults
  mode tcp
  timeout connect 5s
  timeout client 1m
  timeout server 1m
frontend hop
  bind 127.0.0.1:%d%s
  default_backend next
backend next
  server next 127.0.0.1:%d%s
`, listen, bind, next, server)
		out := testhaproxy.Start(b, cfg)
		waitListening(b, listen, func() string { return "haproxy: " + out() })
		next = listen
	}
	return next
}

// waitListening waits until something accepts connections on the loopback
// port; why says what to show if nothing does.
func waitListening(b *testing.B, port int, why func() string) {
	b.Helper()
	testwait.For(b, 10*time.Second, fmt.Sprintf("something listening on %d", port), func() (bool, string) {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return false, fmt.Sprintf("%v\n%s", err, why())
		}
		_ = c.Close()
		return true, ""
	})
}
