package agent

import (
	"errors"
	"os"
	"slices"
)

// listeningPorts returns the TCP ports in LISTEN state in the workspace's
// network namespace, IPv4 and IPv6, sorted and without duplicates.
func listeningPorts() ([]uint16, error) {
	var all []uint16
	var errs []error
	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ports, err := parseProcNetTCP(f)
		_ = f.Close()
		if err != nil {
			errs = append(errs, err)
		}
		all = append(all, ports...)
	}
	if len(errs) == 2 {
		return nil, errors.Join(errs...)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}
