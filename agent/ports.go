package agent

import (
	"bufio"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"

	"airgapcoder/codersdk"
)

// reportPorts scans the workspace's listening TCP ports at once and then
// every PortsInterval on the agent's clock (a ticker tagged "agent" and
// "ports"), and tells coderd when the set changes.
func (a *Agent) reportPorts(ctx context.Context) {
	var sent []uint16
	first := true
	t := a.opts.Clock.NewTicker(a.opts.PortsInterval, "agent", "ports")
	defer t.Stop()
	for {
		ports, err := listeningPorts()
		if err != nil {
			a.log.Debug("scan listening ports", "err", err)
		} else if first || !slices.Equal(ports, sent) {
			req := codersdk.PostAgentPortsRequest{Ports: make([]codersdk.AgentListeningPort, 0, len(ports))}
			for _, p := range ports {
				req.Ports = append(req.Ports, codersdk.AgentListeningPort{Network: "tcp", Port: p})
			}
			if err := a.api().PostAgentPorts(ctx, req); err == nil {
				sent, first = ports, false
			} else if ctx.Err() == nil {
				a.log.Debug("report listening ports", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// parseProcNetTCP returns the ports in LISTEN state of a /proc/net/tcp or
// /proc/net/tcp6 table.
func parseProcNetTCP(r io.Reader) ([]uint16, error) {
	var ports []uint16
	sc := bufio.NewScanner(r)
	header := true
	for sc.Scan() {
		if header {
			header = false
			continue
		}
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st ...
		if len(f) < 4 || f[3] != "0A" { // 0A is TCP_LISTEN
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || p == 0 {
			continue
		}
		ports = append(ports, uint16(p))
	}
	return ports, sc.Err()
}
