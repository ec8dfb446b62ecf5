package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"airgapcoder/codersdk"
)

func (inv *invocation) pingCmd() *cobra.Command {
	var (
		count   int
		wait    time.Duration
		timeout time.Duration
		proxy   string
	)
	cmd := &cobra.Command{
		Use:   "ping NAME",
		Short: "Measure round trips to a workspace's agent through coderd's relay",
		Long: `Measure round trips to a workspace's agent along the path coder ssh takes:
through coderd's relay (at the region --proxy chooses) to the agent's SSH
server. It connects once, then sends
an SSH keepalive request (which the agent answers) every --wait, printing each
round trip, and a summary after the last (or on Ctrl-C).
NAME is [owner/]workspace[.agent]. Exits 1 when no round trip succeeds.`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 {
				return usageErrorf("--num %d: send at least one ping", count)
			}
			if timeout <= 0 {
				return usageErrorf("--timeout %s: must be positive", timeout)
			}
			wa, route, err := inv.agentArg(cmd, args[0], &proxy)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			start := time.Now()
			conn, err := inv.dialAgent(ctx, route, wa, codersdk.DialOptions{Kind: codersdk.RelayKindSSH}, timeout, false)
			if err != nil {
				return err
			}
			defer conn.Close()
			dialed := time.Since(start)
			sconn, chans, reqs, err := ssh.NewClientConn(conn, sshHostPrefix+wa.workspace.Name, &ssh.ClientConfig{
				User: wa.workspace.OwnerName,
				// coderd authenticated both ends, as for coder ssh.
				HostKeyCallback: ssh.InsecureIgnoreHostKey(), //nolint:gosec
				Timeout:         timeout,
			})
			if err != nil {
				return fmt.Errorf("ssh to workspace %s: %w", wa.workspace.Name, err)
			}
			sc := ssh.NewClient(sconn, chans, reqs)
			defer sc.Close()
			via := route.via()
			fmt.Fprintf(inv.stdout, "Connected to agent %s of workspace %s through %s in %s (SSH handshake %s).\n",
				wa.agent.Name, wa.workspace.Name, via, fmtMillis(dialed), fmtMillis(time.Since(start)-dialed))
			s := pingStats{name: wa.workspace.Name}
			defer s.write(inv.stdout)
			for i := range count {
				if i > 0 {
					select {
					case <-ctx.Done():
						return s.result()
					case <-time.After(wait):
					}
				}
				rtt, err := keepaliveRoundTrip(ctx, sc, timeout)
				s.sent++
				switch {
				case errors.Is(err, context.Canceled):
					s.sent--
					return s.result()
				case err != nil:
					fmt.Fprintf(inv.stdout, "ping to %s failed: %v\n", wa.workspace.Name, err)
					continue
				}
				s.add(rtt)
				fmt.Fprintf(inv.stdout, "pong from %s via %s in %s\n", wa.workspace.Name, via, fmtMillis(rtt))
			}
			return s.result()
		},
	}
	cmd.Flags().IntVarP(&count, "num", "n", 10, "Number of pings to send")
	cmd.Flags().DurationVar(&wait, "wait", time.Second, "Time between pings")
	cmd.Flags().DurationVarP(&timeout, "timeout", "t", 5*time.Second, "How long to wait for each answer (and for the connection)")
	proxyFlag(cmd, &proxy)
	return cmd
}

// keepaliveRoundTrip sends an SSH global request that wants a reply and
// times until the reply: the agent answers every such request (no to
// those it does not know), so this is one round trip client → coderd →
// agent and back.
func keepaliveRoundTrip(ctx context.Context, sc *ssh.Client, timeout time.Duration) (time.Duration, error) {
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, _, err := sc.SendRequest("keepalive@openssh.com", true, nil)
		done <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return 0, fmt.Errorf("the connection ended: %w", err)
		}
		return time.Since(start), nil
	case <-t.C:
		return 0, fmt.Errorf("no answer within %s", timeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// pingStats sums up the round trips of a ping, as ping(8) does.
type pingStats struct {
	name     string
	sent     int
	rtts     []time.Duration
	sum, sq2 float64 // in ms
}

func (s *pingStats) add(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	s.rtts = append(s.rtts, d)
	s.sum += ms
	s.sq2 += ms * ms
}

// result is nil when at least one round trip succeeded.
func (s *pingStats) result() error {
	if len(s.rtts) == 0 && s.sent > 0 {
		return fmt.Errorf("no answer from workspace %s to %d ping(s)", s.name, s.sent)
	}
	return nil
}

func (s *pingStats) write(w io.Writer) {
	if s.sent == 0 {
		return
	}
	loss := 100 * float64(s.sent-len(s.rtts)) / float64(s.sent)
	fmt.Fprintf(w, "\n--- %s ping statistics ---\n", s.name)
	fmt.Fprintf(w, "%d packets transmitted, %d packets received, %.1f%% packet loss\n", s.sent, len(s.rtts), loss)
	if len(s.rtts) == 0 {
		return
	}
	n := float64(len(s.rtts))
	lo, hi := s.rtts[0], s.rtts[0]
	for _, d := range s.rtts {
		lo, hi = min(lo, d), max(hi, d)
	}
	avg := s.sum / n
	mdev := math.Sqrt(max(s.sq2/n-avg*avg, 0))
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Fprintf(w, "rtt min/avg/max/mdev = %.3f/%.3f/%.3f/%.3f ms\n", ms(lo), avg, ms(hi), mdev)
}

// fmtMillis prints a duration in milliseconds with three decimals.
func fmtMillis(d time.Duration) string {
	return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
}
