package agent

import (
	"slices"
	"strings"
	"testing"
)

func TestParseProcNetTCP(t *testing.T) {
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12346 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 12347 1 0000000000000000 20 4 30 10 -1
   3: garbage
`
	got, err := parseProcNetTCP(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint16{8080, 22}; !slices.Equal(got, want) {
		t.Errorf("got ports %v, want %v (LISTEN rows only)", got, want)
	}
}

func TestListeningPortsFindsOwnListener(t *testing.T) {
	ports, err := listeningPorts()
	if err != nil {
		t.Skipf("no /proc/net/tcp here: %v", err)
	}
	if !slices.IsSorted(ports) {
		t.Errorf("ports not sorted: %v", ports)
	}
}
